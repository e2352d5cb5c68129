"""A finding as a script of the driver calls A and B made, with the SQL each carried as psql replays it,
and the run's summary (pure)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from leakcheck.discover.compare import Diff
from leakcheck.discover.findings import Finding
from leakcheck.discover.ops import PREPARED, Kind, Op, Who, prepares, quote
from leakcheck.discover.render import DISPLAY, Statement, Via, column_sql, statements
from leakcheck.discover.trace import Lost
from leakcheck.model.target import Driver

_DRIVER_SIDE = {
    "notifications": "the notifications {who}'s driver received",
    "observe": "{who}'s snapshot of its session",
}

#: What an application lost, as a finding's headline says it.
_HEADLINES = {Lost.OTHER_RESULT: "{who} got a result not its own", Lost.DISCONNECTED: "{who} was disconnected",
              Lost.MOVED: "{who} was moved to another server connection", Lost.STALLED: "the pool stalled"}


def headline(f: Finding) -> str | None:
    """What the application lost, in words ("a commit was lost", "B got A's result"), when the finding's own
    difference is a loss (compare.outcomes); None for a difference of session state."""
    first = next((d for d in f.diffs if d.key == f.signature), None)
    if first is None or not first.key.startswith("outcome:"):
        return None
    what, other = Lost(first.key.removeprefix("outcome:")), Who.B if first.who is Who.A else Who.A
    if what is Lost.WRITE:
        at = f.ops[first.index] if first.index < len(f.ops) else None
        words = "a commit was lost" if at is not None and at.kind is Kind.COMMIT else "a write was lost"
    elif what is Lost.OTHER_RESULT and f"_{other}_" in first.subject.split(", not its own")[0]:
        words = f"{first.who} got {other}'s result"
    else:
        words = _HEADLINES[what].format(who=first.who)
    return f"{words}: {first.subject}"


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
    are shown as PDO and ruby-pg name them (`pdo_stmt_0000000N`, `aN`) or else as node-postgres does
    (`stmt_N`), a stand-in with the same per-connection count. `b`: B's own driver in a mixed pair."""

    def __init__(self, driver: Driver, b: Driver | None = None) -> None:
        self.driver = driver
        self.drivers = {Who.A: driver, Who.B: b or driver}
        self._names: dict[tuple[Who, str], str] = {}
        self._count: dict[Who, int] = {}

    def name(self, who: Who, sql: str) -> tuple[str, bool]:
        """(the statement's name, whether this use prepares it)."""
        if (who, sql) in self._names:
            return self._names[(who, sql)], False
        n, driver = self._count.get(who, 0), self.drivers[who]
        self._count[who] = n + 1
        name = (f"_pg3_{n}" if driver == Driver.PSYCOPG else f"__asyncpg_stmt_{n + 1:x}__"
                if driver == Driver.ASYNCPG else f"pdo_stmt_{n + 1:08x}" if driver.value == "pdo"
                else f"a{n + 1}" if driver.value == "ruby-pg" else f"stmt_{n + 1}")
        self._names[(who, sql)] = name
        return name, True

    def freed(self, who: Who, sql: str) -> str:
        """The name of a statement the driver frees: its next use prepares it again."""
        name = self.name(who, sql)[0]
        del self._names[(who, sql)]
        return name


#: Drivers whose free is SQL DEALLOCATE of the statement's name (pdo_pgsql, ruby-pg's agent), not the protocol's Close.
DEALLOCATES = frozenset({"pdo", "ruby-pg"})


def _lines(op: Op, st: Statement, names: DriverNames, last: dict[Who, str]) -> list[str]:
    """psql 18 lines for what a call sends: a bound parameter as \\bind (unnamed, as psycopg sends it below
    its prepare threshold), or, where the driver names it (its prepared path; asyncpg's cache for every
    bound query), as \\parse and \\bind_named with a stand-in of the driver's name; a free as
    \\close_prepared of that name (the protocol's Close), or DEALLOCATE of it where the driver sends that; a bind
    as \\bind_named of the SQL-prepared name; the transaction API as the SQL it stands for. `last`: each
    client's last prepared statement (what its FREE frees)."""
    values = "".join(f" {quote(p)}" for p in st.params)
    driver = names.drivers[op.who]
    if st.via is Via.BOUND and driver == Driver.PSYCOPG:
        return [f"{st.sql} \\bind{values} \\g"]
    if st.via is Via.FREE and op.who in last:
        name = names.freed(op.who, last[op.who])
        return [f"DEALLOCATE {name};" if driver.value in DEALLOCATES else f"\\close_prepared {name}"]
    if st.via is Via.FREE:
        return []
    if st.via is Via.BIND:
        return [f"\\bind_named {st.sql} \\g"]
    if st.via is Via.DRIVER:
        return [f"{st.sql};"]
    if st.via in (Via.PROTOCOL, Via.BOUND):
        name, new = names.name(op.who, st.sql)
        if st.via is Via.PROTOCOL:
            last[op.who] = st.sql
        # a prepared SELECT also reads the client's server identity (the proof the witness confirms)
        sql = f"{st.sql}, pg_backend_pid()" if op.kind is Kind.PROTOCOL else st.sql
        parse = [f"{sql} \\parse {name}"] if new else []
        return [*parse, f"\\bind_named {name}{values} \\g"]
    return [st.sql + ";"]


#: Calls whose answer the script says at once (what the application was told: `commit (returned success)`).
_TOLD = frozenset({Kind.BEGIN, Kind.COMMIT, Kind.ROLLBACK, Kind.FREE, Kind.BIND, Kind.WRITE})


def call(op: Op, prepared_at: dict[Who, int], said: str = "") -> str:
    """The driver call an op is, in words, with what it returned where that matters (`said`): `prepared
    INSERT (the driver's prepared path; returned success)`, `free (the driver's own call, for its statement of
    step 2)`, `commit (the driver's transaction API; returned success)`. `prepared_at`: each client's last
    prepared call's step (1-based)."""
    k = op.kind
    if k in (Kind.BEGIN, Kind.COMMIT, Kind.ROLLBACK):
        name, how = str(k), "the driver's transaction API"
    elif k is Kind.FREE:
        name, how = "free", "the driver's own call" + (f", for its statement of step {prepared_at[op.who]}"
                                                       if op.who in prepared_at else "")
    elif k is Kind.BIND:
        name, how = "bind", f"the driver executes {DISPLAY.obj(op.arg)} by name, without preparing it"
    elif k is Kind.WRITE:
        name, how = ("prepared INSERT", "the driver's prepared path") if op.variant == PREPARED else (
            "INSERT", "the driver's query")
    elif k is Kind.PROTOCOL:
        name, how = "prepared SELECT", "the driver's prepared path"
    elif k is Kind.SET_CONFIG and "bound" in op.variant:
        name, how = "query", "a bound parameter, the driver's default way"
    else:
        return "query"
    told = "" if not said else f"; {said}" if said.startswith("error") else f"; returned {said}"
    return f"{name} ({how}{told})"


def _shown(diff: Diff) -> str:
    return f"--   through the pooler: {diff.subject}  |  direct: {diff.reference}"


def _observation(diff: Diff) -> list[str]:
    sql = column_sql(diff.key, DISPLAY)
    if sql is not None:
        return [sql + ";", _shown(diff)]
    if diff.key.startswith("reported:"):
        what = f"the {diff.key.split(':', 1)[1]} {diff.who}'s driver was told (ParameterStatus)"
    elif diff.key.startswith("outcome:"):
        what = f"what {diff.who} lost ({diff.key.removeprefix('outcome:')})"
    else:
        what = _DRIVER_SIDE.get(diff.key, diff.key).format(who=diff.who)
    return [f"-- {what}:", _shown(diff)]


def _steps(ops: Sequence[Op], diffs: Sequence[Diff], driver: Driver, results: Sequence[str] = (),
           b: Driver | None = None) -> list[str]:
    """The interleaved driver calls, each one's differences right below it; the final snapshots only where
    something differed, numbered on. `results`: what each call returned through the pooler; `b`: B's own
    driver in a mixed pair."""
    by_step: dict[int, list[Diff]] = {}
    for d in diffs:
        by_step.setdefault(d.index, []).append(d)
    names = DriverNames(driver, b)
    last: dict[Who, str] = {}
    prepared_at: dict[Who, int] = {}
    out: list[str] = []
    for index, op in enumerate(ops):
        if op.kind is Kind.OBSERVE:
            out += ["", f"-- {index + 1}. {op.who}: observe"]
            lines = [line for d in by_step.get(index, []) for line in _observation(d)]
            out += lines or ["SELECT pg_backend_pid();  -- no difference"]
            continue
        said = results[index] if index < len(results) and op.kind in _TOLD else ""
        out += ["", f"-- {index + 1}. {op.who}: {call(op, prepared_at, said)}"]
        for st in statements(op, DISPLAY, index + 1):
            out += _lines(op, st, names, last)
        if prepares(op):
            prepared_at[op.who] = index + 1
        out += [_shown(d) for d in by_step.get(index, [])]
    shown = len(ops)
    for offset, who in enumerate(Who):
        at_end = by_step.get(len(ops) + offset, [])
        if at_end:
            shown += 1
            out += ["", f"-- {shown}. {who}: observe (end)"]
            out += [line for d in at_end for line in _observation(d)]
    return out


def script(f: Finding, where: str, driver: Driver, number: int = 1, total: int = 1, client: str = "",
           b: Driver | None = None) -> str:
    """The finding as a script of driver calls, interleaved as they ran; then any other effect of the same
    state. `client`: the driver with its --driver-set settings as ids show it (default: the driver alone);
    `b`: B's own driver in a mixed pair (--pair)."""
    shrunk = "" if f.shrunk else " (the budget ended shrinking early: it may hold steps it does not need)"
    lost = headline(f)
    out = [
        f"-- leakcheck discover, finding {number} of {total}: {title(f)}",
        *([f"-- What the application lost: {lost}"] if lost else []),
        f"-- {where}; driver {client or driver}; found in round {f.round} after {f.found_after:.1f} s, reproduced "
        f"{f.reproduced[0]} of {f.reproduced[1]} runs{shrunk}",
        f"-- through the pooler {f.comparison.subject_servers}; directly {f.comparison.reference_servers}",
        "-- Each step is one call of A's or B's driver, as an application makes it: in autocommit, or inside the",
        "-- transaction it began through the driver's transaction API. Under it, what the call sent, as two psql 18",
        "-- sessions through the pooler replay it (\\parse, \\bind_named, \\close_prepared or DEALLOCATE stand for",
        "-- the driver's prepared path under a stand-in name), and what the client got through the pooler and",
        "-- directly (two sessions). The harness opened no transaction of its own: a session of its own saw each",
        "-- step on the server (pg_stat_activity), and read the rows written back after the run.",
        *_steps(f.ops, f.diffs, driver, f.comparison.results, b),
    ]
    for other in f.also:
        out += ["", f"-- Also, the same state shows as {other.signature} (through the pooler "
                f"{other.comparison.subject_servers}):",
                *_steps(other.ops, other.comparison.diffs, driver, other.comparison.results, b)]
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
