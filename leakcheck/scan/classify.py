"""A statement's session effects, read from PostgreSQL's own parser (pglast), never from patterns on its text.

`Classifier` turns a statement's text into its normalized text (pg_stat_statements' form: constants as
`$n`) and one `Statement` per statement it holds: the session effects it has (`Effect`: a `Kind` and a
detail, such as SET's parameter or the advisory lock function), whether it begins or ends a
transaction block, and whether it is a COPY on the copy protocol (`FROM STDIN` / `TO STDOUT`, whose
place inside or outside a transaction only the session's history tells: workload.py).

The rule, per parse tree node:

- `SET name ...` is `SET` (session) or, with LOCAL, `SET_LOCAL`; its detail is the parameter. `SET ROLE`
  / `RESET ROLE` are `SET_ROLE`, `SET SESSION AUTHORIZATION` `SESSION_AUTHORIZATION`, `SET SESSION
  CHARACTERISTICS AS TRANSACTION ...` `SESSION_CHARACTERISTICS`; `SET TRANSACTION` has no session effect.
  `RESET name` / `RESET ALL` are `RESET`.
- `set_config(name, value, is_local)` (pg_catalog's, or unqualified) is `SET_CONFIG` when is_local is
  false, `SET_CONFIG_LOCAL` when true, `SET_CONFIG_UNKNOWN` when a constant is not in the text (a
  pg_stat_statements export shows `$n`); its detail is the parameter (`?` when not shown).
- `DISCARD ALL|PLANS|SEQUENCES|TEMP`, `DEALLOCATE ALL`, `DEALLOCATE name`, `PREPARE`, `EXECUTE`, `LISTEN`,
  `UNLISTEN`, `LOAD`.
- the advisory lock functions: session locks (`pg_advisory_lock`, `pg_try_advisory_lock`, their
  `_shared` forms) `ADVISORY_LOCK`, their unlocks `ADVISORY_UNLOCK`, the transaction locks
  (`pg_advisory_xact_lock` ...) `ADVISORY_XACT_LOCK`; `currval` and `lastval` `SEQUENCE_STATE`.
- a temporary table (`CREATE TEMP TABLE`, `CREATE TEMP TABLE ... AS`, `SELECT ... INTO TEMP`) is
  `TEMP_TABLE`, with `ON COMMIT DROP` `TEMP_TABLE_ON_COMMIT_DROP`; a temporary view or sequence
  `TEMP_OBJECT`.
- `DECLARE ... WITH HOLD` is `CURSOR_WITH_HOLD`, without it `CURSOR` (it ends with its transaction).

Functions are found anywhere in the tree (`SELECT ... FROM pg_advisory_lock(1)`, inside PREPARE or
DECLARE); a function of another schema with the same name is not PostgreSQL's. What runs inside a
function body or a DO block is not seen.

Speed: the parse tree of each distinct normalized text is classified once (a bounded cache), so a
log's thousands of runs of one statement cost one parse; only set_config, whose name and is_local are
constants, is read from the exact text.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum

from pglast import ast
from pglast.enums.parsenodes import (
    CURSOR_OPT_HOLD,
    DiscardMode,
    TransactionStmtKind,
    VariableSetKind,
)
from pglast.enums.primnodes import OnCommitAction
from pglast.parser import ParseError, normalize, parse_sql

from leakcheck.model.verdicts import Scope


class Kind(StrEnum):
    """A kind of session effect a statement has."""

    SET = "set"  #: SET name = value: until the session ends
    SET_LOCAL = "set_local"  #: SET LOCAL name = value: until the transaction ends
    SET_CONFIG = "set_config"  #: set_config(name, value, false): as SET
    SET_CONFIG_LOCAL = "set_config_local"  #: set_config(name, value, true): as SET LOCAL
    SET_CONFIG_UNKNOWN = "set_config_unknown"  #: set_config whose name or is_local the text does not show
    RESET = "reset"  #: RESET name / RESET ALL
    SET_ROLE = "set_role"  #: SET ROLE / RESET ROLE
    SESSION_AUTHORIZATION = "session_authorization"  #: SET SESSION AUTHORIZATION
    SESSION_CHARACTERISTICS = "session_characteristics"  #: SET SESSION CHARACTERISTICS AS TRANSACTION ...
    DISCARD = "discard"  #: DISCARD ALL / PLANS / SEQUENCES / TEMP
    DEALLOCATE_ALL = "deallocate_all"  #: DEALLOCATE ALL
    DEALLOCATE = "deallocate"  #: DEALLOCATE name
    PREPARE = "prepare"  #: SQL PREPARE name AS ...
    EXECUTE = "execute"  #: SQL EXECUTE name
    PROTOCOL_PREPARE = "protocol_prepare"  #: a named protocol-level prepared statement (a log's `execute S_1:`)
    LISTEN = "listen"  #: LISTEN channel
    UNLISTEN = "unlisten"  #: UNLISTEN channel / UNLISTEN *
    ADVISORY_LOCK = "advisory_lock"  #: a session advisory lock (pg_advisory_lock, pg_try_advisory_lock, _shared)
    ADVISORY_UNLOCK = "advisory_unlock"  #: a session advisory lock's release (pg_advisory_unlock, _all, _shared)
    ADVISORY_XACT_LOCK = "advisory_xact_lock"  #: a transaction advisory lock (pg_advisory_xact_lock, ...)
    TEMP_TABLE = "temp_table"  #: a temporary table that outlives its transaction
    TEMP_TABLE_ON_COMMIT_DROP = "temp_table_on_commit_drop"  #: a temporary table ON COMMIT DROP
    TEMP_OBJECT = "temp_object"  #: a temporary view or sequence
    CURSOR_WITH_HOLD = "cursor_with_hold"  #: DECLARE ... WITH HOLD: outlives its transaction
    CURSOR = "cursor"  #: DECLARE without HOLD: ends with its transaction
    SEQUENCE_STATE = "sequence_state"  #: currval / lastval: the session's last nextval
    LOAD = "load"  #: LOAD a shared library into the session's server process
    COPY_OUTSIDE_TRANSACTION = "copy_outside_transaction"  #: COPY FROM STDIN / TO STDOUT outside a transaction
    #: COPY FROM STDIN / TO STDOUT where the input does not tell the transaction (an export, SQL files)
    COPY_TRANSACTION_UNKNOWN = "copy_transaction_unknown"


#: The kinds whose state ends with the transaction (the pooler-safe forms).
TRANSACTION_KINDS = frozenset({Kind.SET_LOCAL, Kind.SET_CONFIG_LOCAL, Kind.ADVISORY_XACT_LOCK,
                               Kind.TEMP_TABLE_ON_COMMIT_DROP, Kind.CURSOR})

_LABEL = {
    Kind.SET: "SET {}", Kind.SET_LOCAL: "SET LOCAL {}", Kind.SET_CONFIG: "set_config('{}', ..., false)",
    Kind.SET_CONFIG_LOCAL: "set_config('{}', ..., true)", Kind.SET_CONFIG_UNKNOWN: "set_config('{}', ..., ?)",
    Kind.RESET: "RESET {}", Kind.SET_ROLE: "SET ROLE", Kind.SESSION_AUTHORIZATION: "SET SESSION AUTHORIZATION",
    Kind.SESSION_CHARACTERISTICS: "SET SESSION CHARACTERISTICS", Kind.DISCARD: "DISCARD {}",
    Kind.DEALLOCATE_ALL: "DEALLOCATE ALL", Kind.DEALLOCATE: "DEALLOCATE name", Kind.PREPARE: "SQL PREPARE",
    Kind.EXECUTE: "SQL EXECUTE", Kind.PROTOCOL_PREPARE: "protocol-level prepared statements{}",
    Kind.LISTEN: "LISTEN", Kind.UNLISTEN: "UNLISTEN", Kind.ADVISORY_LOCK: "{}", Kind.ADVISORY_UNLOCK: "{}",
    Kind.ADVISORY_XACT_LOCK: "{}", Kind.TEMP_TABLE: "CREATE TEMP TABLE{}",
    Kind.TEMP_TABLE_ON_COMMIT_DROP: "CREATE TEMP TABLE ... ON COMMIT DROP", Kind.TEMP_OBJECT: "CREATE TEMP {}",
    Kind.CURSOR_WITH_HOLD: "DECLARE ... WITH HOLD", Kind.CURSOR: "DECLARE (without HOLD)", Kind.SEQUENCE_STATE: "{}",
    Kind.LOAD: "LOAD", Kind.COPY_OUTSIDE_TRANSACTION: "COPY outside a transaction",
    Kind.COPY_TRANSACTION_UNKNOWN: "COPY (transaction not known)",
}


@dataclass(frozen=True, slots=True, order=True)
class Effect:
    """One session effect: its kind and a detail (SET's parameter, the lock function, ...; "" when none)."""

    kind: Kind
    detail: str = ""

    @property
    def scope(self) -> Scope:
        """How long the state lives: the transaction (the pooler-safe forms) or the session."""
        return Scope.TRANSACTION if self.kind in TRANSACTION_KINDS else Scope.SESSION

    @property
    def label(self) -> str:
        """How reports name it: `SET statement_timeout`, `pg_advisory_lock`, `DECLARE ... WITH HOLD`."""
        detail = self.detail
        if self.kind is Kind.PROTOCOL_PREPARE:
            detail = f" (named as {detail}'s)" if detail else ""
        elif self.kind is Kind.TEMP_TABLE:
            detail = f" ... {detail}" if detail else ""
        return _LABEL[self.kind].format(detail)

    @property
    def key(self) -> str:
        """A stable id for files and test names: `set:statement_timeout`, `listen`."""
        return f"{self.kind.value}:{self.detail}" if self.detail else self.kind.value


class Tx(StrEnum):
    """What a statement does to the session's transaction block."""

    BEGIN = "begin"  #: BEGIN / START TRANSACTION (and COMMIT AND CHAIN: a new block at once)
    END = "end"  #: COMMIT / ROLLBACK / END / ABORT / PREPARE TRANSACTION


@dataclass(frozen=True, slots=True)
class Statement:
    """One statement's session effects, its part in a transaction block, and whether it is a COPY on the
    copy protocol."""

    effects: tuple[Effect, ...] = ()
    tx: Tx | None = None
    copy: bool = False


SESSION_LOCKS = frozenset({"pg_advisory_lock", "pg_advisory_lock_shared", "pg_try_advisory_lock",
                           "pg_try_advisory_lock_shared"})
SESSION_UNLOCKS = frozenset({"pg_advisory_unlock", "pg_advisory_unlock_shared", "pg_advisory_unlock_all"})
XACT_LOCKS = frozenset({"pg_advisory_xact_lock", "pg_advisory_xact_lock_shared", "pg_try_advisory_xact_lock",
                        "pg_try_advisory_xact_lock_shared"})
SEQUENCE_FUNCTIONS = frozenset({"currval", "lastval"})
_FUNCTIONS = SESSION_LOCKS | SESSION_UNLOCKS | XACT_LOCKS | SEQUENCE_FUNCTIONS | {"set_config"}
_BEGINS = {TransactionStmtKind.TRANS_STMT_BEGIN, TransactionStmtKind.TRANS_STMT_START}
_ENDS = {TransactionStmtKind.TRANS_STMT_COMMIT, TransactionStmtKind.TRANS_STMT_ROLLBACK,
         TransactionStmtKind.TRANS_STMT_PREPARE}
_DISCARD = {DiscardMode.DISCARD_ALL: "ALL", DiscardMode.DISCARD_PLANS: "PLANS",
            DiscardMode.DISCARD_SEQUENCES: "SEQUENCES", DiscardMode.DISCARD_TEMP: "TEMP"}


class _Constants(Exception):
    """The normalized text hides a constant the class depends on: classify the exact text."""


def _walk(node: object) -> Iterator[ast.Node]:
    """Every node below `node` (itself included), depth first."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, ast.Node):
            yield item
            stack.extend(getattr(item, name) for name in item)
        elif isinstance(item, tuple):
            stack.extend(item)


def _function(call: ast.FuncCall) -> str | None:
    """PostgreSQL's function this call names (unqualified or pg_catalog's), among the ones that matter."""
    names = [getattr(part, "sval", "") for part in call.funcname or ()]
    if not names or (len(names) == 2 and names[0] != "pg_catalog") or len(names) > 2:
        return None
    return names[-1] if names[-1] in _FUNCTIONS else None


def _constant(node: object) -> str | bool | None:
    """A constant argument's value (a string, a boolean, or a string cast to a type), else None."""
    if isinstance(node, ast.TypeCast):
        node = node.arg
    if not isinstance(node, ast.A_Const) or node.isnull:
        return None
    value = node.val
    if isinstance(value, ast.Boolean):
        return bool(value.boolval)
    if isinstance(value, ast.String):
        return str(value.sval)
    if isinstance(value, ast.Integer):
        return str(value.ival)
    return None


_TRUE, _FALSE = {"true", "t", "on", "yes", "y", "1"}, {"false", "f", "off", "no", "n", "0"}


def _set_config(call: ast.FuncCall, exact: bool) -> Effect:
    args = call.args or ()
    name = _constant(args[0]) if args else None
    local = _constant(args[2]) if len(args) > 2 else None
    if isinstance(local, str):
        local = True if local.lower() in _TRUE else False if local.lower() in _FALSE else None
    if (name is None or local is None) and not exact:
        raise _Constants
    parameter = name.lower() if isinstance(name, str) else "?"
    if parameter == "role" and local is False:
        return Effect(Kind.SET_ROLE)
    if parameter == "session_authorization" and local is False:
        return Effect(Kind.SESSION_AUTHORIZATION)
    if local is None or not isinstance(name, str):
        return Effect(Kind.SET_CONFIG_UNKNOWN, parameter)
    return Effect(Kind.SET_CONFIG_LOCAL if local else Kind.SET_CONFIG, parameter)


def _called(stmt: ast.Node, exact: bool) -> list[Effect]:
    effects: list[Effect] = []
    for node in _walk(stmt):
        if not isinstance(node, ast.FuncCall):
            continue
        name = _function(node)
        if name is None:
            continue
        if name == "set_config":
            effects.append(_set_config(node, exact))
        elif name in SESSION_LOCKS:
            effects.append(Effect(Kind.ADVISORY_LOCK, name))
        elif name in SESSION_UNLOCKS:
            effects.append(Effect(Kind.ADVISORY_UNLOCK, name))
        elif name in XACT_LOCKS:
            effects.append(Effect(Kind.ADVISORY_XACT_LOCK, name))
        else:
            effects.append(Effect(Kind.SEQUENCE_STATE, name))
    return effects


def _variable(stmt: ast.VariableSetStmt) -> Effect | None:
    name = stmt.name or ""
    if stmt.kind is VariableSetKind.VAR_RESET_ALL:
        return Effect(Kind.RESET, "ALL")
    if name == "TRANSACTION":
        return None  # SET TRANSACTION: this transaction only
    if name == "SESSION CHARACTERISTICS":
        return Effect(Kind.SESSION_CHARACTERISTICS)
    if name == "role":
        return Effect(Kind.SET_LOCAL, "role") if stmt.is_local else Effect(Kind.SET_ROLE)
    if name == "session_authorization":
        return Effect(Kind.SET_LOCAL, "session_authorization") if stmt.is_local else Effect(Kind.SESSION_AUTHORIZATION)
    if stmt.kind is VariableSetKind.VAR_RESET:
        return Effect(Kind.RESET, name.lower())
    return Effect(Kind.SET_LOCAL if stmt.is_local else Kind.SET, name.lower())


def _temp(persistence: str | None, on_commit: object, what: str = "") -> Effect | None:
    if persistence != "t":
        return None
    if what:
        return Effect(Kind.TEMP_OBJECT, what)
    if on_commit is OnCommitAction.ONCOMMIT_DROP:
        return Effect(Kind.TEMP_TABLE_ON_COMMIT_DROP)
    return Effect(Kind.TEMP_TABLE, "ON COMMIT DELETE ROWS" if on_commit is OnCommitAction.ONCOMMIT_DELETE_ROWS else "")


def _utility(stmt: ast.Node) -> tuple[Effect | None, Tx | None, bool]:
    """The statement's own effect (a utility command's), its part in a transaction block, and whether it is
    a COPY on the copy protocol."""
    effect: Effect | None = None
    if isinstance(stmt, ast.VariableSetStmt):
        effect = _variable(stmt)
    elif isinstance(stmt, ast.TransactionStmt):
        if stmt.kind in _BEGINS or (stmt.kind is TransactionStmtKind.TRANS_STMT_COMMIT and stmt.chain):
            return None, Tx.BEGIN, False
        if stmt.kind in _ENDS and not stmt.chain:
            return None, Tx.END, False
    elif isinstance(stmt, ast.DiscardStmt):
        effect = Effect(Kind.DISCARD, _DISCARD[stmt.target] if stmt.target in _DISCARD else str(stmt.target))
    elif isinstance(stmt, ast.DeallocateStmt):
        effect = Effect(Kind.DEALLOCATE_ALL if stmt.isall or not stmt.name else Kind.DEALLOCATE)
    elif isinstance(stmt, ast.PrepareStmt):
        effect = Effect(Kind.PREPARE)
    elif isinstance(stmt, ast.ExecuteStmt):
        effect = Effect(Kind.EXECUTE)
    elif isinstance(stmt, ast.ListenStmt):
        effect = Effect(Kind.LISTEN)
    elif isinstance(stmt, ast.UnlistenStmt):
        effect = Effect(Kind.UNLISTEN)
    elif isinstance(stmt, ast.LoadStmt):
        effect = Effect(Kind.LOAD)
    elif isinstance(stmt, ast.DeclareCursorStmt):
        effect = Effect(Kind.CURSOR_WITH_HOLD if (stmt.options or 0) & CURSOR_OPT_HOLD else Kind.CURSOR)
    elif isinstance(stmt, ast.CreateStmt):
        effect = _temp(stmt.relation.relpersistence if stmt.relation else None, stmt.oncommit)
    elif isinstance(stmt, ast.CreateTableAsStmt) and stmt.into is not None and stmt.into.rel is not None:
        effect = _temp(stmt.into.rel.relpersistence, stmt.into.onCommit)
    elif isinstance(stmt, ast.SelectStmt) and stmt.intoClause is not None and stmt.intoClause.rel is not None:
        effect = _temp(stmt.intoClause.rel.relpersistence, stmt.intoClause.onCommit)
    elif isinstance(stmt, ast.ViewStmt) and stmt.view is not None:
        effect = _temp(stmt.view.relpersistence, None, "VIEW")
    elif isinstance(stmt, ast.CreateSeqStmt) and stmt.sequence is not None:
        effect = _temp(stmt.sequence.relpersistence, None, "SEQUENCE")
    elif isinstance(stmt, ast.CopyStmt):
        return None, None, stmt.filename is None and not stmt.is_program
    return effect, None, False


def _statements(text: str, exact: bool) -> tuple[Statement, ...]:
    out = []
    for raw in parse_sql(text):
        if raw.stmt is None:
            continue
        own, tx, copy = _utility(raw.stmt)
        effects = ([own] if own is not None else []) + _called(raw.stmt, exact)
        out.append(Statement(tuple(dict.fromkeys(effects)), tx, copy))
    return tuple(out)


def classify(text: str) -> tuple[Statement, ...]:
    """Every statement of `text`, classified from its exact text (ParseError when it does not parse)."""
    return _statements(text, exact=True)


#: Distinct texts (and distinct normalized texts) whose classes are kept (then each cache starts again).
CACHE = 20_000
#: (normalized text, its statements, whether none of them has an effect, a transaction step or a COPY)
Classified = tuple[str, tuple[Statement, ...], bool]


def _plain(statements: tuple[Statement, ...]) -> bool:
    return all(not s.effects and s.tx is None and not s.copy for s in statements)


class Classifier:
    """Text -> (normalized text, statements). Each distinct text is normalized once while it is cached (a
    log of bound parameters repeats its texts), and each distinct normalized text parsed once."""

    def __init__(self, cache: int = CACHE) -> None:
        self._texts: dict[str, Classified] = {}
        self._normalized: dict[str, tuple[Statement, ...]] = {}
        self._limit = cache

    def __call__(self, text: str) -> Classified:
        known = self._texts.get(text)
        if known is None:
            known = self._classify(text)
            if len(self._texts) >= self._limit:
                self._texts.clear()
            self._texts[text] = known
        return known

    def _classify(self, text: str) -> Classified:
        normalized = normalize(text)  # ParseError: the text is not SQL PostgreSQL parses
        found = self._normalized.get(normalized)
        if found is None:
            try:
                found = _statements(normalized, exact=normalized == text)
            except _Constants:
                found = _statements(text, exact=True)
                return normalized, found, _plain(found)
            except ParseError:  # a normalized form PostgreSQL does not parse back (a constant where only one may be)
                try:
                    found = _statements(text, exact=False)
                except _Constants:
                    found = _statements(text, exact=True)
                    return normalized, found, _plain(found)
            if len(self._normalized) >= self._limit:
                self._normalized.clear()
            self._normalized[normalized] = found
        return normalized, found, _plain(found)
