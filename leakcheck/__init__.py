"""leakcheck: measure which PostgreSQL session state leaks between clients through PgBouncer."""

from leakcheck.config.config import Config
from leakcheck.model.errors import LeakcheckError, ProvisionError, StartError, UsageError
from leakcheck.model.target import Driver, Route, Target
from leakcheck.model.verdicts import Observation, Outcome, Verdict, classify
from leakcheck.model.versions import Spec, Version
from leakcheck.probes import PROBES
from leakcheck.probes.base import Probe
from leakcheck.run.runner import run_probe

__all__ = [
    "PROBES", "Config", "Driver", "LeakcheckError", "Observation", "Outcome", "Probe", "ProvisionError",
    "Route", "Spec", "StartError", "Target", "UsageError", "Verdict", "Version", "classify", "run_probe",
]
