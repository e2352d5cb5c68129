"""Whether an outcome passes its test: one pure rule for the pytest plugin and `leakcheck merge`."""

from __future__ import annotations

from collections.abc import Mapping

from .expectations import compare
from .probes import Probe
from .runner import control_expectation
from .verdicts import Outcome, Verdict


def problem(probe: Probe, outcome: Outcome, expected: Mapping[str, Verdict] | None) -> str | None:
    """None when `outcome` passes; else the failure message.

    - a control passes when it measured what its route requires (`control_expectation`);
    - a leak test passes, with `expected` (the --expect verdicts), when it measured the expected
      verdict (`expectations.compare`), and without, only when it measured isolated (or not
      applicable: the pooler refused what the probe needs; the plugin shows it as a skip).

    An error (or a skip) never passes: no rule expects one.
    """
    if outcome.route.is_control:
        want = control_expectation(probe, outcome.route)
        if outcome.verdict in (want, Verdict.NOT_APPLICABLE):  # not applicable: the probe cannot run here
            return None
        return (f"control ({outcome.route.value}) must measure {want.value}, measured {outcome.verdict.value}: "
                f"{outcome.evidence}. This probe cannot be trusted here")
    if expected is not None:
        return compare(outcome, expected)
    if outcome.verdict in (Verdict.ISOLATED, Verdict.NOT_APPLICABLE):  # not applicable: shown as a skip
        return None
    return f"{outcome.verdict.value.upper()}: {outcome.evidence}"
