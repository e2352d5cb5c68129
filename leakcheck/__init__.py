"""leakcheck: measure which PostgreSQL session state leaks between clients through PgBouncer."""

from .clients import Driver
from .config import Config
from .errors import LeakcheckError, ProvisionError, StartError, UsageError
from .probes import PROBES, Probe
from .runner import Target, run_probe
from .verdicts import Observation, Outcome, Route, Verdict, classify
from .versions import Spec, Version

__all__ = [
    "PROBES", "Config", "Driver", "LeakcheckError", "Observation", "Outcome", "Probe", "ProvisionError",
    "Route", "Spec", "StartError", "Target", "UsageError", "Verdict", "Version", "classify", "run_probe",
]
