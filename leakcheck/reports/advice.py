"""What to do about a measured verdict: one short line per (probe, verdict), fitted to the cell.

Advice is keyed on the verdict leakcheck measured and reads the cell (pooler kind, version and
settings, PostgreSQL version, driver) only to pick what fits it: a setting the pooler version has,
the driver's own switch. It never states a result: "PgBouncer 1.26+ re-applies it" names a
feature to measure, not a verdict. `advice(outcome)` is None when there is nothing to do
(isolated, skipped) and for controls (they check the harness, not your application).

Code in advice text is written between backticks (reports turn it into code spans).
"""

from __future__ import annotations

from leakcheck.model.errors import REFUSALS
from leakcheck.model.verdicts import Fact, Outcome, Scope, Verdict
from leakcheck.probes import PROBES
from leakcheck.probes.base import Login, Probe
from leakcheck.probes.prepared import NEVER_PREPARED
from leakcheck.reports.cell import AdviceCell, reset_tail
from leakcheck.reports.outcome_rules import OUTCOME_RULES
from leakcheck.reports.rules import RULES

__all__ = ["RULES", "advice", "generic", "not_applicable"]

_PROBES = {p.id: p for p in PROBES}


def advice(outcome: Outcome) -> str | None:
    """The advice line for this outcome, or None (isolated without a misreport, skipped, a control)."""
    if outcome.route.is_control or outcome.verdict is Verdict.SKIPPED:
        return None
    cell = AdviceCell.of(outcome)
    probe = _PROBES.get(outcome.probe)
    if outcome.verdict is Verdict.ISOLATED:
        return _misreported(cell) if Fact.MISREPORTED in outcome.facts else None
    if outcome.verdict is Verdict.ERROR:
        return ("No verdict: leakcheck could not measure this cell (see the evidence); fix what it names and run "
                "the cell again before drawing conclusions.")
    if outcome.verdict is Verdict.NOT_APPLICABLE:
        return not_applicable(outcome, cell, probe)
    rule = RULES.get(outcome.probe) or OUTCOME_RULES.get(outcome.probe)
    said = rule(outcome, cell) if rule is not None else None
    if said is None and probe is not None and probe.scope is Scope.TRANSACTION and outcome.verdict is Verdict.LEAKS:
        return (f"Transaction-scoped state should never outlive its transaction: re-run this cell, compare "
                f"the shared control, and report it to {cell.product} with the evidence.")
    text = said if said is not None else generic(outcome, cell)
    if cell.advice.preface:
        text = f"{cell.advice.preface} {text}"
    if Fact.MISREPORTED in outcome.facts and outcome.probe != "search_path":
        text = f"{text} {_misreported(cell)}"
    return text


def generic(outcome: Outcome, cell: AdviceCell) -> str:
    """The fallback for a probe without its own entry, by verdict."""
    if outcome.verdict is Verdict.LEAKS:
        return ("Session state outlives the transaction on a shared server connection: set it inside each "
                "transaction (`SET LOCAL ...`, or `set_config(name, value, true)`), or give the clients that "
                f"need it a session pool or a direct connection.{reset_tail(cell)}")
    if outcome.verdict is Verdict.LOST:
        return ("The client's state did not follow it to another server connection: re-establish it at the "
                "start of every transaction, or pin those clients (a session pool or a direct connection).")
    if outcome.verdict is Verdict.LOSES_WRITES:
        return (f"A commit the application was told succeeded is not in the database, through {cell.product}: "
                "nothing told the application; do not run this workload through it until a cell without the loss "
                "(another setting of the pooler or the driver) is measured.")
    return (f"The feature errors through {cell.product}: avoid it on pooled connections, or run it on a "
            "session pool or a direct connection.")


def not_applicable(outcome: Outcome, cell: AdviceCell, probe: Probe | None) -> str:
    """What a measured "not applicable" means for the application."""
    if cell.pool_mode == "statement" or any(r in outcome.evidence for r in REFUSALS):
        return ("`pool_mode=statement` refuses transaction blocks (`BEGIN ... COMMIT`), so nothing that needs "
                "one works through it: no `SET LOCAL`, `pg_advisory_xact_lock`, `ON COMMIT DROP` or "
                "multi-statement transaction; use it only for single-statement autocommit work and give the "
                "rest `pool_mode=transaction` or `session`.")
    if outcome.evidence.startswith(NEVER_PREPARED):
        return ("These driver settings never prepare a statement on the server, so no protocol-level prepared "
                "statement can leak or break through the pooler: keep them while a cell without them measures a "
                "problem; compare the cell with the driver's defaults to see whether they are still needed.")
    if cell.is_running_pooler and probe is not None and probe.login == Login.SUPERUSER:
        return "This probe logs in as a superuser: give `--pooled-dsn` a superuser login to measure it."
    if cell.is_running_pooler and probe is not None and probe.fixtures:
        return ("Create the test roles and tables first (`leakcheck fixtures --dsn=<superuser URI> "
                "--role=<the --pooled-dsn role>`), then run this probe again.")
    return "The pooler refused something this probe needs (see the evidence): it could not be measured here."


def _misreported(cell: AdviceCell) -> str:
    return (f"The {cell.driver.value} driver was told a value the server did not have: do not trust its "
            "ParameterStatus cache (e.g. `conn.info.parameter_status()`); read `current_setting()` when it matters.")
