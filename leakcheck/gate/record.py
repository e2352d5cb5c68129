"""`--record`: which verdicts a run may write, merged into the previous file, written atomically.

Everything that writes a matrix file is here, so it can be made safe for parallel writers
(pytest-xdist workers) in one place. Rules:

- only measurements are written (isolated, leaks, lost, breaks): for a key whose outcome was an
  error or a skip, the file keeps its previous value, or has no entry;
- only verdicts whose controls passed in the same outcomes: the probe on two direct sessions, on one
  shared session and (for a pooler leakcheck started) through that pooler in session mode, with the
  same PostgreSQL and applications. A control that failed (`judge`: this probe cannot be trusted
  there) or did not run (`--controls=no`, `-k`) leaves the key out, as an error does;
- entries this run did not measure are kept, so a partial run updates only what it measured;
- an interrupted run, or one that did not get to run its tests, writes nothing;
- the new file replaces the old one in one step (config/output_files.py's `write_atomic`);
- the read-merge-write holds an exclusive lock (`locked`), so concurrent writers of one file
  (two runs, or a run and `leakcheck merge`) cannot lose each other's entries. Under pytest-xdist
  only the controller writes: it gets every worker's outcomes from the test reports.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from leakcheck.config.output_files import check_writable, locked, write_atomic
from leakcheck.gate import expectations
from leakcheck.gate.baseline import Expectation
from leakcheck.gate.judge import Policy, judge
from leakcheck.model.errors import LeakcheckError
from leakcheck.model.target import Route, Target
from leakcheck.model.verdicts import Outcome, Verdict
from leakcheck.probes import PROBES

OPTION = "--record"
_HINT = "move it away, or give --record another path"


@dataclass(frozen=True)
class Plan:
    """What a finished run writes: the merged verdicts and how they came to be."""

    verdicts: dict[str, Expectation]
    measured: int  #: keys written from this run's measurements
    kept: int  #: keys of the previous file this run did not measure, kept as they were
    #: key -> why it was not recorded ("error", "skipped", "measured differently: ...")
    unrecorded: dict[str, str] = field(default_factory=dict)
    #: key -> why its measurement was left out: a control of it failed, or did not run (CONTROL_FAILED, NO_CONTROL)
    untrusted: dict[str, str] = field(default_factory=dict)
    unrecorded_kept: int = 0  #: of those, how many kept the previous file's value
    dropped: int = 0  #: error/skipped entries of the previous file (never written again)
    #: keys whose verdict changed, so the reason given for the old one was dropped
    reasons_dropped: tuple[str, ...] = ()


CONTROL_FAILED = "a control failed"  #: a control of the verdict measured what it must not: the probe cannot be trusted
NO_CONTROL = "its controls did not run"  #: --controls=no, or -k left them out: nothing says the probe works


def plan(previous: Mapping[str, Expectation], outcomes: Iterable[Outcome]) -> Plan:
    """Merge this run's pooled-route verdicts into `previous` (pure). A reason stays with its entry
    while the verdict stays the same; when the verdict changes, the reason (about the old one) goes.
    A verdict is written only when its controls passed in `outcomes` (`untrusted_by`)."""
    outcomes = list(outcomes)
    untrusted_by = _untrusted(outcomes)
    by_key: dict[str, list[Verdict]] = {}
    distrusted: dict[str, str] = {}
    for outcome in outcomes:
        if outcome.route is Route.TRANSACTION:
            k = _written_key(expectations.key(outcome), previous)
            by_key.setdefault(k, []).append(outcome.verdict)
            why = untrusted_by(outcome)
            if why is not None:
                distrusted.setdefault(k, why)
    measured: dict[str, Expectation] = {}
    unrecorded: dict[str, str] = {}
    untrusted: dict[str, str] = {}
    reasons_dropped: list[str] = []
    for k, verdicts in by_key.items():
        failed = [v for v in verdicts if not expectations.recordable(v)]
        distinct = list(dict.fromkeys(verdicts))
        old = previous.get(k)
        if failed and failed[0] is not Verdict.LOSES_WRITES:
            unrecorded[k] = failed[0].value
        elif k in distrusted:
            untrusted[k] = distrusted[k]
        elif distinct == [Verdict.LOSES_WRITES] and old is not None and old.verdict is Verdict.LOSES_WRITES:
            measured[k] = old  # accepted by hand, with its reason: kept while it is measured again
        elif failed:
            unrecorded[k] = failed[0].value + " (accepted only by hand, with a reason)"
        elif len(distinct) > 1:  # two patch releases of one key disagree: the key cannot hold both
            unrecorded[k] = "measured differently: " + "/".join(v.value for v in distinct)
        else:
            if old is not None and old.reason and old.verdict is not distinct[0]:
                reasons_dropped.append(k)
            keep = old.reason if old is not None and old.verdict is distinct[0] else ""
            measured[k] = Expectation(distinct[0], keep)
    merged = {k: e for k, e in previous.items() if expectations.gate_value(e.verdict)}
    kept = sum(1 for k in merged if k not in by_key)
    unrecorded_kept = sum(1 for k in unrecorded if k in merged)
    merged.update(measured)
    return Plan(
        verdicts=merged, measured=len(measured), kept=kept, unrecorded=unrecorded, untrusted=untrusted,
        unrecorded_kept=unrecorded_kept, dropped=len(previous) - sum(1 for e in previous.values()
                                                                      if expectations.gate_value(e.verdict)),
        reasons_dropped=tuple(sorted(reasons_dropped)),
    )


def controls_of(target: Target) -> tuple[Target, ...]:
    """The controls a pooled-route verdict rests on (run/matrix.py runs them with --controls=yes): two direct
    sessions and one shared session on its PostgreSQL, and its pooler in session mode (none for a running
    pooler: leakcheck cannot change its mode); each with the same applications."""
    direct = tuple(replace(target, pooler=None, route=route) for route in (Route.DIRECT, Route.SHARED))
    pooler = target.pooler
    if pooler is None or not pooler.kind.started:
        return direct
    return (*direct, replace(target, pooler=pooler.in_session_mode, route=Route.SESSION))


def _untrusted(outcomes: Sequence[Outcome]) -> Callable[[Outcome], str | None]:
    """Why a pooled-route outcome's verdict cannot be written (CONTROL_FAILED, NO_CONTROL), or None: each of
    its controls ran in `outcomes` and passed by the gate's own rule (`judge`; not applicable passes there)."""
    probes = {p.id: p for p in PROBES}
    controls: dict[tuple[str, Target], list[Outcome]] = {}
    for o in outcomes:
        if o.route.is_control:
            controls.setdefault((o.probe, o.target), []).append(o)

    def why(outcome: Outcome) -> str | None:
        probe = probes.get(outcome.probe)
        ran = [controls.get((outcome.probe, target), []) for target in controls_of(outcome.target)]
        if probe is None or not all(ran):
            return NO_CONTROL
        failed = any(judge(probe, control, Policy()).fails for each in ran for control in each)
        return CONTROL_FAILED if failed else None
    return why


def _written_key(k: str, previous: Mapping[str, Expectation]) -> str:
    """A file that holds this cell for every release of its driver (keys like `.../psycopg/probe`)
    keeps it that way, also for a probe it has no entry for yet; otherwise the measured driver
    release is part of the key."""
    anyone = expectations.any_driver_version(k)
    if k in previous:
        return k
    cell = anyone.rsplit("/", 1)[0] + "/"
    return anyone if anyone in previous or any(key.startswith(cell) for key in previous) else k


def summary(path: Path, result: Plan) -> list[str]:
    """The terminal summary lines for a written file."""
    left_out = ""
    if result.untrusted:
        causes = Counter(result.untrusted.values())
        left_out = (f"; {len(result.untrusted)} left out, as their probe cannot be trusted there (the file keeps what "
                    "it had for them): " + ", ".join(f"{n} where {r}" for r, n in sorted(causes.items()))
                    + f", e.g. {min(result.untrusted)}")
    lines = [f"recorded {result.measured} verdicts in {path} ({result.kept} kept from the previous file{left_out})"]
    if result.unrecorded:
        reasons = Counter("measured differently" if r.startswith("measured") else r
                          for r in result.unrecorded.values())
        why = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items()))
        lines.append(
            f"{len(result.unrecorded)} verdicts not recorded ({why}: an error or a skip measured nothing; "
            f"{result.unrecorded_kept} kept the previous file's value, the others have no entry): "
            f"e.g. {min(result.unrecorded)}; fix the cause and record again"
        )
    if result.dropped:
        lines.append(f"dropped {result.dropped} error/skipped entries of the previous file (they measured nothing)")
    if result.reasons_dropped:
        lines.append(f"{len(result.reasons_dropped)} verdicts changed, so their reasons were dropped (they were about "
                     f"the old verdict): e.g. {result.reasons_dropped[0]}; give new reasons where you accept them")
    return lines


def not_written(exitstatus: int, stopped: bool) -> str | None:
    """Why a finished session must not write its verdicts; None when it may.

    Only a run that ran its tests to the end (exit status 0 or 1) may write: an interrupted run
    (Ctrl-C, SIGTERM, pytest.exit, a collection error, --stepwise) holds a fraction of the matrix,
    and a usage error or internal error measured nothing trustworthy.
    """
    if exitstatus == 2 or stopped:  # pytest.ExitCode.INTERRUPTED, or session.shouldstop
        return "the run was interrupted"
    if exitstatus not in (0, 1):
        return f"the run did not complete (exit status {exitstatus})"
    return None


def check_target(path: Path) -> dict[str, Expectation]:
    """Before the run: `path` can be written (or created), and any file there is a matrix.

    Returns its verdicts (empty when there is no file yet). Creates nothing.
    """
    exists = check_writable(path, OPTION, "matrices/prod.toml")
    return expectations.read(path, OPTION, _HINT) if exists else {}


def previous_verdicts(path: Path) -> dict[str, Expectation]:
    """The verdicts the file holds right now (empty when there is none): merged into, never lost."""
    return expectations.read(path, OPTION, _HINT) if path.exists() else {}


def save(path: Path, outcomes: Iterable[Outcome]) -> list[str]:
    """Merge into the file as it is now and write, under `locked`; the summary lines.

    Raises UsageError (unreadable file) or OSError (write).
    """
    with locked(path):
        result = plan(previous_verdicts(path), outcomes)
        write_atomic(path, expectations.render(result.verdicts, path))
    return summary(path, result)


def finish(path: Path, outcomes: Sequence[Outcome], reason: str | None) -> tuple[list[str], bool]:
    """--record at the end of a run (or of `leakcheck merge`): the summary lines, and False when
    writing failed (the caller fails the run). `reason` (from `not_written`) means: write nothing."""
    if reason is None and not any(o.route is Route.TRANSACTION for o in outcomes):
        reason = "no leak test ran"
    if reason is not None:
        unchanged = " (the file is unchanged)" if path.exists() else ""
        return [f"{path} not recorded: {reason}{unchanged}"], True
    try:
        return save(path, outcomes), True
    except (LeakcheckError, OSError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return [f"{path} not recorded: writing it failed ({why}); the file is unchanged"], False
