"""leakcheck: measure which PostgreSQL session state leaks between clients through PgBouncer."""

from .config import Config
from .errors import LeakcheckError, ProvisionError, StartError, UsageError
from .probes import PROBES, Probe
from .runner import run_probe
from .verdicts import Driver, Observation, Outcome, Route, Target, Verdict, classify
from .versions import Spec, Version

__all__ = [
    "PROBES", "Config", "Driver", "LeakcheckError", "Observation", "Outcome", "Probe", "ProvisionError",
    "Route", "Spec", "StartError", "Target", "UsageError", "Verdict", "Version", "classify", "run_probe",
]
