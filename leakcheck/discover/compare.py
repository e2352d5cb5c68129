"""Normalize two traces of one sequence, compare them and what their applications lost, and check their
proofs (pure).

What is normalized away, because it legitimately differs between a route and the reference:
- server identities (pid, backend_start): they are proofs, checked here, never compared;
- each run's token and lock class: names map back to the display names (`lc<token>_s1` -> `lc_s1`);
- the names of protocol-level prepared statements (`_pg3_0`, `__asyncpg_stmt_1__`, PgBouncer's
  `PGBOUNCER_3`) become `<protocol>`: the name is the driver's or the pooler's choice (PgBouncer
  1.21+ renames every statement it prepares), not the client's state; what tells whose statement
  a client sees is its text, which names its client and slot ('lc_A_p1') and is kept. SQL PREPARE
  names are the client's own and are kept;
- error messages (they quote those names and pids): errors compare by SQLSTATE; messages are shown.
Left out: a statement refused on one side only because its transaction had already failed there
(25P02), every later step of a client whose connection closed (SQLSTATE class 08, "connection
is closed"), and every step from one where the pool stalled on: they follow from the earlier step
that failed, which is a difference of its own. A difference the connections show before any op (the empty
sequence's: PgBouncer reports pgjdbc's DateStyle as pgjdbc sent it, 'ISO', where PostgreSQL says 'ISO, MDY')
is the connections' start, reported once and left out wherever a client still shows those very two values and
no op before may have given them (`beyond_start`). Everything else compares as read, including NULL versus ''
and the order of notifications.

What each application lost (`outcomes`) compares too, per step and client, in words that do not
depend on the run: a write reported committed and not in the database, a prepared call's value that is
not the client's own, a connection closed, a client gone on on another server connection (its
ordinal among its client's connections, by the proofs), a stalled pool. Such a difference comes first
at its step and stands for that step's own result (`outcome:<what>`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from leakcheck.discover.ops import DRIVER_CALLS, SETTING, Kind, Op, Who
from leakcheck.discover.render import DISPLAY, Names
from leakcheck.discover.trace import Event, Failure, Loss, Lost, Proof, Trace
from leakcheck.model.faults import NO_SQLSTATE
from leakcheck.model.target import Route
from leakcheck.model.verdicts import ServerId

PROTOCOL_NAME = "<protocol>"
ABORTED = "error 25P02"  # in failed SQL transaction


def canon(value: Any, names: Names) -> str:
    """A value as text a reader recognises: strings quoted (so '' differs from NULL), lists bracketed,
    this run's names replaced by the display names."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(canon(v, names) for v in value) + "]"
    if isinstance(value, str):
        return "'" + value.replace(names.prefix, DISPLAY.prefix) + "'"
    return str(value)


def _prepared(entries: list[str], names: Names) -> list[str]:
    """`name=text-label` entries of pg_prepared_statements, protocol-level names normalized."""
    out = []
    for entry in entries:
        name, _, label = entry.partition("=")
        shown = name.replace(names.prefix, DISPLAY.prefix) if name.startswith(names.prefix) else PROTOCOL_NAME
        out.append(f"{shown}={label}")
    return sorted(out)


def observed(event: Event, names: Names) -> dict[str, tuple[str, str]]:
    """key -> (compared text, shown text) of one event."""
    if event.failure is not None:
        key = "observe" if event.is_snapshot else f"result:{event.op.kind if event.op else '?'}"
        shown = f"error {event.failure.sqlstate}: {event.failure.message}".replace(names.prefix, DISPLAY.prefix)
        return {key: (f"error {event.failure.sqlstate}", shown)}
    if not event.is_snapshot:
        assert event.op is not None
        text = canon(event.value, names)
        return {f"result:{event.op.kind}": (text, text)}
    out = {}
    for key, value in event.fields:
        if key == "prepared" and isinstance(value, list):
            value = _prepared(value, names)
        text = canon(value, names)
        out[key] = (text, text)
    return out


@dataclass(frozen=True)
class Diff:
    """One thing a client observed differently through the route than in the reference."""

    index: int  # the step (len(ops) and len(ops)+1: A's and B's final snapshots)
    who: Who
    key: str  # 'setting:work_mem', 'prepared', 'result:execute', ...
    subject: str  # as shown (errors with their message)
    reference: str


def closes(failure: Failure | None) -> bool:
    """A failure after which the client's connection is gone: SQLSTATE class 08, or the driver's own
    'connection is closed' (no SQLSTATE). Its statement, and the client's later ones, reached no server."""
    if failure is None:
        return False
    closed = failure.sqlstate == NO_SQLSTATE and "closed" in failure.message.lower()
    return failure.sqlstate.startswith("08") or closed


def _closed_at(trace: Trace) -> dict[Who, int]:
    """Each client's first step whose failure closed its connection."""
    out: dict[Who, int] = {}
    for event in trace.events:
        if closes(event.failure):
            out.setdefault(event.who, event.index)
    return out


def ordinals(trace: Trace) -> dict[int, int]:
    """Event index -> which server connection (1, 2, ...) of its client it ran on, by its proof."""
    seen: dict[Who, list[ServerId]] = {}
    at: dict[tuple[Who, int], ServerId] = {}
    for proof in sorted(trace.proofs, key=lambda p: p.index):
        at.setdefault((proof.who, proof.index), proof.server)
        mine = seen.setdefault(proof.who, [])
        if proof.server not in mine:
            mine.append(proof.server)
    out = {}
    for event in trace.events:
        server = at.get((event.who, event.proof_at)) if event.proof_at is not None else None
        if server is not None:
            out[event.index] = seen[event.who].index(server) + 1
    return out


def outcomes(trace: Trace) -> list[Loss]:
    """What the applications lost in this run: the trace's own (writes read back, a stall) and what its
    events show: a client's first closing failure (disconnected), a prepared call's value not its own
    (another client's result), a client's first step on a further server connection of its own (moved:
    the one it shared ended, and its session state with it)."""
    out = [replace(x, shown=x.shown.replace(trace.names.prefix, DISPLAY.prefix)) for x in trace.losses]
    closed: set[Who] = set()
    on = ordinals(trace)
    moved: set[Who] = set()
    for event in trace.events:
        if not event.ran:
            continue
        if closes(event.failure) and event.who not in closed:
            closed.add(event.who)
            shown = str(event.failure).replace(trace.names.prefix, DISPLAY.prefix)
            out.append(Loss(event.index, event.who, Lost.DISCONNECTED, "its connection was closed",
                            f"its connection was closed: {shown}"))
        if event.op is not None and event.op.kind is Kind.PROTOCOL and event.failure is None:
            own = trace.names.value(event.who, event.op.arg)
            if event.value != own:
                got = canon(event.value, trace.names)
                out.append(Loss(event.index, event.who, Lost.OTHER_RESULT, got,
                                f"returned {got}, not its own {canon(own, trace.names)}"))
        if on.get(event.index, 1) > 1 and event.who not in moved:
            moved.add(event.who)
            told = "an error" if event.failure is not None else "no error"
            out.append(Loss(event.index, event.who, Lost.MOVED, "on another server connection",
                            f"on server connection #{on[event.index]}, after the one it shared ended: its session "
                            f"state stayed behind ({told} told {event.who})"))
    return out


#: How a step reads where its run lost nothing of that kind.
_KEPT = {Lost.WRITE: "the row is in the database", Lost.MOVED: "on its own server connection throughout",
         Lost.STALLED: "did not wait"}


def _outcome_diffs(subject: Trace, reference: Trace) -> list[Diff]:
    """What the route's applications lost that the reference's did not lose alike. A loss of the reference's alone
    (a write rolled back after an error that the route never raised, because another client's state was
    there) is no loss of the route's: the state that differed is that difference."""
    mine = {(x.index, x.who, x.what): x for x in outcomes(subject)}
    theirs = {(x.index, x.who, x.what): x for x in outcomes(reference)}
    diffs = []
    for key in sorted(mine, key=lambda k: (k[0], str(k[1]), str(k[2]))):
        g, w = mine[key], theirs.get(key)
        if g.compared == (w.compared if w else None):
            continue
        index, who, what = key
        kept = _result(reference, index) if what in (Lost.DISCONNECTED, Lost.OTHER_RESULT) else _KEPT[what]
        diffs.append(Diff(index, who, f"outcome:{what}", g.shown, w.shown if w else kept))
    return diffs


def said(event: Event, names: Names) -> str:
    """What a step returned to its client, as a script says it: `success`, a value, an error, `read`."""
    if not event.ran:
        return "never ran"
    if event.failure is None and (event.is_snapshot or event.value is None):
        return "read" if event.is_snapshot else "success"
    return next(iter(observed(event, names).values()))[1]


def _result(trace: Trace, index: int) -> str:
    """A step's own result as shown (where it lost nothing)."""
    return said(trace.events[index], trace.names)


def compare(subject: Trace, reference: Trace) -> list[Diff]:
    """Every difference, in step order, what a client lost first at its step. Both traces ran the same
    ops, so events pair up one to one."""
    if len(subject.events) != len(reference.events):
        raise ValueError("the traces ran different sequences")
    lost = _outcome_diffs(subject, reference)
    stands_for = {(d.index, d.who) for d in lost if d.key in (f"outcome:{Lost.DISCONNECTED}",
                                                                f"outcome:{Lost.OTHER_RESULT}")}
    closed = [_closed_at(subject), _closed_at(reference)]
    gone = {who: min(c[who] for c in closed if who in c) for who in Who if any(who in c for c in closed)}
    diffs = []
    for mine, theirs in zip(subject.events, reference.events, strict=True):
        diffs += [d for d in lost if d.index == mine.index]
        if mine.index > gone.get(mine.who, mine.index) or not (mine.ran and theirs.ran):
            continue  # the client's connection closed earlier on one side, or the pool stalled: that was the difference
        if (mine.index, mine.who) in stands_for:
            continue
        got, want = observed(mine, subject.names), observed(theirs, reference.names)
        if mine.is_snapshot and (mine.failure is None) != (theirs.failure is None):
            read = ("read", "read")  # a snapshot failed on one side only: one difference, not one per column
            got, want = {"observe": got.get("observe", read)}, {"observe": want.get("observe", read)}
        for key in dict.fromkeys([*got, *want]):
            g, w = got.get(key, ("-", "-")), want.get(key, ("-", "-"))
            if g[0] != w[0] and ABORTED not in (g[0], w[0]):
                diffs.append(Diff(mine.index, mine.who, key, g[1], w[1]))
    return diffs


#: What a connection's start may differ on: what a client reads of a setting, or was told of one (ParameterStatus).
START_KEYS = ("setting:", "reported:")
#: The ops that name one setting (its `arg`).
_NAMING = (Kind.SET, Kind.SET_LOCAL, Kind.SET_CONFIG, Kind.RESET)


def start_key(diff: Diff, same_app: bool = True) -> tuple[Who | None, str, str, str]:
    """What makes a difference the connections' start: what was observed and its two values, and by which client
    where A and B are different applications (a mixed pair); with one application either client's start is
    the other's too (a start that shows on some connections only may have shown on A's alone)."""
    return None if same_app else diff.who, diff.key, diff.subject, diff.reference


def _may_be_an_ops(diff: Diff, ops: Sequence[Op]) -> bool:
    """Whether an op before the difference's step may have given its client the value it shows: one of the
    client's own that names the setting, a RESET of it by the other, or the other's SET of it to that value."""
    name = diff.key.split(":", 1)[1]
    for op in ops[:diff.index]:
        if op.kind not in _NAMING or op.arg != name:
            continue
        if op.who is diff.who or op.kind is Kind.RESET or name not in SETTING:
            return True
        if SETTING[name].value(op.who, op.variant == "alt").strip("'") == diff.subject.strip("'"):
            return True
    return False


def beyond_start(diffs: list[Diff], start: tuple[Diff, ...], ops: Sequence[Op] = (),
                 same_app: bool = True) -> list[Diff]:
    """The differences that are not the connections' start: one that shows what the empty sequences showed
    (`start`: the same key, the same two values; `start_key`) is left out, unless an op before its step may
    have given its client that value (its own naming the setting, the other's RESET of it or SET to that
    value): then it compares as read. A leaked RESET ALL or DISCARD ALL that brings a client back to exactly
    its start value is left out too (it shows on every other setting that client had set)."""
    known = {start_key(d, same_app) for d in start}
    return [d for d in diffs if start_key(d, same_app) not in known or _may_be_an_ops(d, ops)]


@dataclass(frozen=True)
class Comparison:
    """A sequence's differences, where each route's clients ran, and what each op's call returned through
    the route (for the report: `commit (returned success)`)."""

    diffs: tuple[Diff, ...]
    subject_servers: str = ""  # e.g. "A and B on pid 4242"
    reference_servers: str = ""  # e.g. "A on pid 4243, B on pid 4244"
    results: tuple[str, ...] = ()  # per op, through the route: "success", "'lc_A_p1'", "error 26000: ..."


def results(trace: Trace, ops: int) -> tuple[str, ...]:
    """What each of the first `ops` steps returned to its client (shown as the script says it)."""
    return tuple(said(event, trace.names) for event in trace.events[:ops])


def servers_text(trace: Trace) -> str:
    a, b = _servers(trace, Who.A), _servers(trace, Who.B)
    return f"A and B on {a}" if a == b else f"A on {a}, B on {b}"


def _servers(trace: Trace, who: Who) -> str:
    """The client's server connections in the order it used them."""
    order = dict.fromkeys(p.server for p in sorted(trace.proofs, key=lambda p: p.index) if p.who is who)
    return " then ".join(str(s) for s in order) or "none"


def proof_problems(trace: Trace, earlier: set[ServerId]) -> Iterator[str]:
    """Why this trace does not prove what its route needs (nothing: it does). Every step carries a
    proof, except those of a client whose connection had closed (they reached no server), those that never
    ran (the pool stalled), and a driver call that sends only the driver's own statement (ops.DRIVER_CALLS:
    no tag finds it), which is proven where its transaction's other steps are (execute.covered). Transaction
    mode with a pool of one: A and B on one server connection throughout, or on a fresh one only
    right after a failure closed a connection (the pooler dropped the shared one). Session mode and
    direct sessions: each client on its own one, never the other's, a new one only right after a failure of
    its own closed the one before (its application's pool connected again: Hikari after pgjdbc refused a
    DateStyle). Never a server connection an earlier sequence used (every sequence starts from fresh server
    connections)."""
    gone: set[Who] = set()
    for event in trace.events:
        exempt = not event.ran or (event.op is not None and event.op.kind in DRIVER_CALLS)
        if event.proof_at is None and event.who not in gone and not closes(event.failure) and not exempt:
            what = str(event.op) if event.op else "final snapshot"
            yield f"step {event.index + 1} ({event.who}: {what}) carries no proof of its server connection"
        if closes(event.failure):
            gone.add(event.who)
    a, b = trace.servers(Who.A), trace.servers(Who.B)
    where = f"A on {_servers(trace, Who.A)}; B on {_servers(trace, Who.B)}"
    if trace.route is Route.TRANSACTION:
        yield from _shared(trace, where)
    elif a & b or not all(_moved_only_after_closing(trace, who) for who in Who):
        yield f"A and B did not each keep a server connection of their own ({where})"
    reused = sorted(str(s) for s in (a | b) & earlier)
    if reused:
        yield f"server connection(s) {', '.join(reused)} already served an earlier sequence: not fresh"


def _changes(proofs: list[Proof], breaks: list[int]) -> bool:
    """Whether proofs in step order change server connection only right after a closing failure (`breaks`,
    step indexes), and never back to one used before."""
    current: ServerId | None = None
    used: set[ServerId] = set()
    since = -1
    for proof in sorted(proofs, key=lambda p: p.index):
        if proof.server == current:
            since = proof.index  # the window for a move runs from the last proof on the connection it leaves
            continue
        if current is not None and (proof.server in used or not any(since <= i < proof.index for i in breaks)):
            return False
        current, since = proof.server, proof.index
        used.add(proof.server)
    return True


def _moved_only_after_closing(trace: Trace, who: Who) -> bool:
    """The client's own server connections: a new one only right after a failure of its own closed one."""
    return _changes([p for p in trace.proofs if p.who is who],
                    [e.index for e in trace.events if e.who is who and closes(e.failure)])


def _shared(trace: Trace, where: str) -> Iterator[str]:
    """One server connection at a time for both clients, a new one only after a closing failure."""
    if not _changes(list(trace.proofs), [e.index for e in trace.events if closes(e.failure)]):
        yield f"A and B did not share one server connection through the pool of one ({where})"
