"""A finding as the SQL script a person replays with two psql sessions, and the run's summary (pure)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from leakcheck.discover.compare import Diff
from leakcheck.discover.findings import Finding
from leakcheck.discover.ops import Kind, Op, Who, quote
from leakcheck.discover.render import DISPLAY, Statement, Via, column_sql, statements
from leakcheck.model.verdicts import Driver

_DRIVER_SIDE = {
    "notifications": "the notifications {who}'s driver received",
    "server connection": "which server connection {who} ran on (by its proof: pg_backend_pid(), backend_start)",
    "observe": "{who}'s snapshot of its session",
}


def title(f: Finding) -> str:
    if f.known:
        return "known: " + ", ".join(f.probes)
    return "new: " + ", ".join(f.unlisted) + (f" (with {', '.join(f.probes)})" if f.probes else "")


def slug(f: Finding) -> str:
    words = f.probes if f.known else f.unlisted
    text = ("known-" if f.known else "new-") + "-".join(words)
    return re.sub(r"[^a-zA-Z0-9_.-]+", "-", text).strip("-")[:80]


class DriverNames:
    """The names the driver gives its protocol-level statements, per client: psycopg `_pg3_N` and
    asyncpg `__asyncpg_stmt_N__` (numbered per connection), one per distinct query text; an agent's
    are shown as node-postgres names them (`stmt_N`), a stand-in with the same per-connection count."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver
        self._names: dict[tuple[Who, str], str] = {}
        self._count: dict[Who, int] = {}

    def name(self, who: Who, sql: str) -> tuple[str, bool]:
        """(the statement's name, whether this use prepares it)."""
        if (who, sql) in self._names:
            return self._names[(who, sql)], False
        n = self._count.get(who, 0)
        self._count[who] = n + 1
        name = (f"_pg3_{n}" if self.driver == Driver.PSYCOPG else f"__asyncpg_stmt_{n + 1:x}__"
                if self.driver == Driver.ASYNCPG else f"stmt_{n + 1}")
        self._names[(who, sql)] = name
        return name, True

    def freed(self, who: Who, sql: str) -> str:
        """The name of a statement the driver frees: its next use prepares it again."""
        name = self.name(who, sql)[0]
        del self._names[(who, sql)]
        return name


def _lines(op: Op, st: Statement, names: DriverNames) -> list[str]:
    """psql 18 lines for a statement: a bound parameter as \\bind (unnamed, as psycopg sends it below
    its prepare threshold), or, where the driver names it (protocol prepares; asyncpg's cache for every
    bound query), as \\parse and \\bind_named with the driver's name."""
    values = "".join(f" {quote(p)}" for p in st.params)
    if st.via is Via.BOUND and names.driver == Driver.PSYCOPG:
        return [f"{st.sql} \\bind{values} \\g"]
    if st.via is Via.FREE:
        return [f"\\close_prepared {names.freed(op.who, st.sql)}  -- the driver frees its statement"]
    if st.via is Via.DRIVER:
        return [f"{st.sql};  -- through the driver's transaction API"]
    if st.via in (Via.PROTOCOL, Via.BOUND):
        sql = f"{st.sql}, pg_backend_pid()" if st.via is Via.PROTOCOL else st.sql
        name, new = names.name(op.who, st.sql)
        parse = [f"{sql} \\parse {name}"] if new else []
        return [*parse, f"\\bind_named {name}{values} \\g"]
    return [st.sql + ";"]


def _shown(diff: Diff) -> str:
    return f"--   through the pooler: {diff.subject}  |  direct: {diff.reference}"


def _observation(diff: Diff) -> list[str]:
    sql = column_sql(diff.key, DISPLAY)
    if sql is not None:
        return [sql + ";", _shown(diff)]
    if diff.key.startswith("reported:"):
        what = f"the {diff.key.split(':', 1)[1]} {diff.who}'s driver was told (ParameterStatus)"
    else:
        what = _DRIVER_SIDE.get(diff.key, diff.key).format(who=diff.who)
    return [f"-- {what}:", _shown(diff)]


def _steps(ops: Sequence[Op], diffs: Sequence[Diff], driver: Driver) -> list[str]:
    """The interleaved steps, each one's differences right below it; the final snapshots only where
    something differed, numbered on."""
    by_step: dict[int, list[Diff]] = {}
    for d in diffs:
        by_step.setdefault(d.index, []).append(d)
    names = DriverNames(driver)
    out: list[str] = []
    for index, op in enumerate(ops):
        out += ["", f"-- {index + 1}. {op.who}" + (": observe" if op.kind is Kind.OBSERVE else "")]
        if op.kind is Kind.OBSERVE:
            lines = [line for d in by_step.get(index, []) for line in _observation(d)]
            out += lines or ["SELECT pg_backend_pid();  -- no difference"]
            continue
        for st in statements(op, DISPLAY):
            out += _lines(op, st, names)
        out += [_shown(d) for d in by_step.get(index, [])]
    shown = len(ops)
    for offset, who in enumerate(Who):
        at_end = by_step.get(len(ops) + offset, [])
        if at_end:
            shown += 1
            out += ["", f"-- {shown}. {who}: observe (end)"]
            out += [line for d in at_end for line in _observation(d)]
    return out


def script(f: Finding, where: str, driver: Driver, number: int = 1, total: int = 1, client: str = "") -> str:
    """The finding as an interleaved psql script; then any other effect of the same state. `client`:
    the driver with its --driver-set settings as ids show it (default: the driver alone)."""
    shrunk = "" if f.shrunk else " (the budget ended shrinking early: it may hold steps it does not need)"
    out = [
        f"-- leakcheck discover, finding {number} of {total}: {title(f)}",
        f"-- {where}; driver {client or driver}; found in round {f.round} after {f.found_after:.1f} s, reproduced "
        f"{f.reproduced[0]} of {f.reproduced[1]} runs{shrunk}",
        f"-- through the pooler {f.comparison.subject_servers}; directly {f.comparison.reference_servers}",
        "-- Replay: two psql sessions, A and B, connected through the pooler; run the steps in order.",
        "-- Outside BEGIN ... COMMIT each step ran in its own transaction block that began with the proof",
        "-- (SELECT pg_backend_pid(), backend_start), which changes nothing for these statements.",
        "-- Under a step: what that client observed through the pooler and directly (two sessions).",
        *_steps(f.ops, f.diffs, driver),
    ]
    for other in f.also:
        out += ["", f"-- Also, the same state shows as {other.signature} (through the pooler "
                f"{other.comparison.subject_servers}):", *_steps(other.ops, other.comparison.diffs, driver)]
    return "\n".join(out) + "\n"


def summary(findings: Sequence[Finding]) -> str:
    """'3 known (statement_timeout, sql_prepare, temp_table), 1 new (set:work_mem)'."""
    known = [f for f in findings if f.known]
    new = [f for f in findings if not f.known]
    parts = [f"{len(known)} known" + (f" ({', '.join(_ids(known, True))})" if known else ""),
             f"{len(new)} new" + (f" ({', '.join(_ids(new, False))})" if new else "")]
    return ", ".join(parts)


def _ids(findings: Iterable[Finding], known: bool) -> list[str]:
    return list(dict.fromkeys(i for f in findings for i in (f.probes if known else f.unlisted)))
