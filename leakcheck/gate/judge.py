"""Whether an outcome passes its test: one pure rule for the pytest plugin, `leakcheck run` and
`leakcheck merge`.

- A control passes when it measured what its route requires (`Probe.control_expectation`), or when the
  probe cannot run there (not applicable). The positive control passes when it saw the leak, also
  when what leaked broke the client too (BREAKS+leaked: a clean-up in the one shared session).
- A leak test, with a baseline (--expect): its measured verdict must be the expected one. An
  expected leak/loss/break is *accepted* (reported as an expected failure, with its evidence);
  any difference fails, both ways: a new problem, or a problem that went away (re-record it).
- With a policy (--require): the required probes must be isolated, whatever the baseline accepts;
  without a baseline, the other probes' problems are accepted (the team lives with them).
- Without either: only isolated passes.
- --update: the baseline is being rewritten, so a difference is recorded, not failed.
- An error (or a skip) never passes: no rule expects one. Not applicable is shown as a skip.
- A lost write no error told the application (loses_writes) passes only where a baseline expects exactly
  that, with a reason a person wrote: never by a policy, never by --update.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from leakcheck.config.config import Config
from leakcheck.gate import expectations
from leakcheck.gate.baseline import Expectation
from leakcheck.gate.expectations import gate_value, key, lookup
from leakcheck.model.verdicts import Fact, Outcome, Verdict
from leakcheck.probes.base import Probe


class Kind(StrEnum):
    PASSED = "passed"  #: what was required or expected, and isolated
    ACCEPTED = "accepted"  #: a problem the baseline or the policy accepts: an expected failure (xfail)
    NOT_APPLICABLE = "not_applicable"  #: the pooler refused what the probe needs: a skip
    FAILED = "failed"  #: the gate fails


@dataclass(frozen=True)
class Judgement:
    kind: Kind
    message: str = ""  #: why it failed, or what was accepted and why

    @property
    def fails(self) -> bool:
        return self.kind is Kind.FAILED


@dataclass(frozen=True)
class Policy:
    """What a run holds its leak tests to."""

    expected: Mapping[str, Expectation] | None = None  #: --expect's baseline
    required: frozenset[str] | None = None  #: --require's probe ids (None: no policy)
    update: bool = False  #: --update: differences are recorded, not failed


def policy_of(config: Config) -> Policy:
    """The run's policy, read before any server starts: the --expect baseline (a one-line UsageError for a
    file that is none), --require and --update."""
    expected = expectations.load(config.expect) if config.expect is not None else None
    return Policy(expected=expected, required=config.require, update=config.update)


def judge(probe: Probe, outcome: Outcome, policy: Policy) -> Judgement:
    if outcome.route.is_control:
        want = probe.control_expectation(outcome.route)
        if outcome.verdict is want or (want is Verdict.LEAKS and Fact.LEAKED in outcome.facts):
            return Judgement(Kind.PASSED)
        if outcome.verdict is Verdict.NOT_APPLICABLE:
            return Judgement(Kind.NOT_APPLICABLE, f"not applicable: {outcome.evidence}")
        if outcome.verdict is Verdict.LOSES_WRITES:  # no sharing is needed for this: a finding in itself
            return Judgement(Kind.FAILED, f"LOSES WRITES on the {outcome.route.value} control too, where the clients "
                             f"share no server connection: the pooler or the driver loses them by itself: "
                             f"{outcome.evidence}")
        return Judgement(Kind.FAILED, f"control ({outcome.route.value}) must measure {want.value}, measured "
                         f"{outcome.verdict.value}: {outcome.evidence}. This probe cannot be trusted here")
    verdict = outcome.verdict
    if not gate_value(verdict):
        if policy.expected is None:
            return Judgement(Kind.FAILED, f"{verdict.value.upper()}: {outcome.evidence}")
        return Judgement(Kind.FAILED, f"measured {verdict.value}, which never passes a gate: {outcome.evidence}")
    required = policy.required is not None and probe.id in policy.required
    if policy.expected is not None and not policy.update:
        difference = _difference(outcome, policy.expected)
        if difference is not None:
            return Judgement(Kind.FAILED, difference)
    elif verdict is Verdict.LOSES_WRITES:  # no policy accepts it: only a baseline entry with its reason
        return Judgement(Kind.FAILED, f"LOSES WRITES, which only a baseline entry with a reason accepts: "
                         f"{outcome.evidence}")
    if required and verdict is not Verdict.ISOLATED:
        return Judgement(Kind.FAILED, f"{probe.id} is required (--require) to be isolated, measured "
                         f"{_said(outcome)}: {outcome.evidence}")
    if verdict is Verdict.ISOLATED:
        return Judgement(Kind.PASSED)
    if verdict is Verdict.NOT_APPLICABLE:
        return Judgement(Kind.NOT_APPLICABLE, f"not applicable: {outcome.evidence}")
    if policy.update:
        return Judgement(Kind.ACCEPTED, f"{_said(outcome)} (recorded by --update): {outcome.evidence}")
    if policy.expected is not None:
        found = lookup(outcome, policy.expected)
        reason = f" ({found.reason})" if found is not None and found.reason else ""
        return Judgement(Kind.ACCEPTED, f"{_said(outcome)}, as the baseline expects{reason}: {outcome.evidence}")
    if policy.required is not None:
        return Judgement(Kind.ACCEPTED, f"{_said(outcome)}, not required by --require: {outcome.evidence}")
    return Judgement(Kind.FAILED, f"{verdict.value.upper()}: {outcome.evidence}")


def _said(outcome: Outcome) -> str:
    return "+".join([outcome.verdict.value, *outcome.other_facts])


def _difference(outcome: Outcome, expected: Mapping[str, Expectation]) -> str | None:
    """None when the measured verdict is the expected one, else one line saying how it differs."""
    want = lookup(outcome, expected)
    got = outcome.verdict
    if want is None:
        return f"no expected verdict for {key(outcome)} (measured {got.value}); record one with --record or --update"
    if want.verdict is got:
        return None
    if want.verdict is Verdict.ISOLATED:
        return f"new {got.value}: expected isolated, measured {got.value}: {outcome.evidence}"
    if got is Verdict.ISOLATED:
        return (f"the expected {want.verdict.value} went away: measured isolated. Good news; re-record with --update "
                f"so the gate holds it: {outcome.evidence}")
    return f"expected {want.verdict.value}, measured {got.value}: {outcome.evidence}"


def problem(probe: Probe, outcome: Outcome, expected: Mapping[str, Expectation] | None) -> str | None:
    """The failure message, or None when the outcome passes (accepted and not applicable pass too)."""
    found = judge(probe, outcome, Policy(expected=expected))
    return found.message if found.fails else None
