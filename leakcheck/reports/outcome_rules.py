"""Advice for what an application lost (the transaction-shaped probes, probes/transactions.py): each line
names the outcome measured in this cell, then what removes it. Like rules.py, a rule returns None for a
verdict it has nothing specific for."""

from __future__ import annotations

from leakcheck.model.verdicts import Fact, Outcome, Verdict
from leakcheck.reports.cell import AdviceCell
from leakcheck.reports.rules import Rule, tracking_on


def _driver_prepares_off(c: AdviceCell) -> str:
    """The cell's driver's switch that keeps its statements off the server (and its frees with them)."""
    return {"pdo": "`PDO::ATTR_EMULATE_PREPARES => true` (or `PDO::PGSQL_ATTR_DISABLE_PREPARES`)",
            "ruby-pg": "Rails' `prepared_statements: false`",
            "pgjdbc": "`prepareThreshold=0`", "psycopg": "`prepare_threshold=None`",
            "asyncpg": "`statement_cache_size=0`", "postgres-js": "`prepare: false`"}.get(
        c.driver.value, f"{c.driver.value}'s own setting that stops it preparing")


def _tracking(c: AdviceCell) -> str:
    given = c.setting("max_prepared_statements")
    return f"`max_prepared_statements={given}`" if given is not None else "its default `max_prepared_statements`"


def free_before_commit(o: Outcome, c: AdviceCell) -> str | None:
    if o.verdict is Verdict.LOSES_WRITES:
        return (f"Your {c.driver.value} application loses transactions here: its commit returned success and the row "
                f"is not in the database. {c.named} with {_tracking(c)} runs its clients' statements under names of "
                "its own, so the driver's DEALLOCATE of its own name, sent when a statement is freed inside a "
                "transaction, fails and aborts the transaction, and COMMIT then rolls back without an error. Set "
                f"{_driver_prepares_off(c)}, or `max_prepared_statements = 0` in {c.ini}: compare those cells, "
                "measured beside this one.")
    if o.verdict is Verdict.BREAKS and Fact.LOST_WRITE in o.facts:
        return (f"Freeing a statement inside a transaction fails through {c.named} with {_tracking(c)} (the driver "
                "deallocates a name the server does not have) and the transaction is lost, with an error: set "
                f"{_driver_prepares_off(c)}, or `max_prepared_statements = 0` in {c.ini}.")
    return None


def bind_unprepared(o: Outcome, c: AdviceCell) -> str | None:
    if Fact.DISCONNECTED not in o.facts:
        return None
    moved = (" and the other client was moved to a new server connection without a word, losing its session "
             "settings" if Fact.MOVED in o.facts else "")
    on = f" with {_tracking(c)}" if c.is_bouncer and tracking_on(c) else ""
    return (f"{c.named}{on} disconnects a client that executes by name a statement it never prepared through the "
            f"pooler (an SQL `PREPARE`, then the driver's execute-by-name){moved}: prepare through the driver's "
            f"protocol API, or run `PREPARE`/`EXECUTE` both as SQL, or set `max_prepared_statements = 0` in {c.ini}.")


def stalled(o: Outcome, c: AdviceCell) -> str | None:
    if Fact.STALLED not in o.facts:
        return None
    return ("A client's transaction stayed open after its statements failed (its COMMIT or ROLLBACK failed too), "
            f"holding the server connection {c.product} gives the next client: the pool stalled. Keep the driver's "
            f"own statements from colliding ({_driver_prepares_off(c)}, or statement tracking in the pooler), and "
            "set `idle_in_transaction_session_timeout` as a last guard.")


def _first(*rules: Rule) -> Rule:
    def rule(o: Outcome, c: AdviceCell) -> str | None:
        return next((said for r in rules if (said := r(o, c)) is not None), None)
    return rule


OUTCOME_RULES: dict[str, Rule] = {
    "tx_free_before_commit": _first(free_before_commit, stalled),
    "tx_unit_of_work": stalled,
    "tx_prepare_close": stalled,
    "tx_cursor": stalled,
    "bind_unprepared": bind_unprepared,
}
