"""The statements of a workload counted per session effect, in bounded memory.

`Workload.add` takes each statement an input yields (inputs.py), classifies it (classify.py), follows
its session's transaction block (BEGIN ... COMMIT; a message of several statements is one implicit
block) so that a COPY is known to run outside one, and counts it under each of its effects, by its
normalized text. What is kept is bounded whatever the input's size: per effect at most
`STATEMENTS` distinct normalized texts (the others counted), per text the first `SOURCES` places,
the open transactions of at most `SESSIONS` sessions (the oldest forgotten first), and
`EXAMPLES` statements that did not parse.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from pglast.parser import ParseError

from leakcheck.scan.classify import Classifier, Effect, Kind, Tx
from leakcheck.scan.inputs import MAX_STATEMENT, Ended, Sent
from leakcheck.scan.mapping import driver_of

STATEMENTS = 20
SOURCES = 3
SESSIONS = 100_000
EXAMPLES = 5
#: How much of a statement's text a report quotes.
QUOTED = 500


@dataclass
class Seen:
    """One normalized statement of an effect: how often it ran, and where (the first places)."""

    text: str
    count: int = 0
    sources: list[str] = field(default_factory=list)


@dataclass
class Found:
    """An effect the workload has: how often, and its statements (the first STATEMENTS distinct ones)."""

    effect: Effect
    count: int = 0
    statements: dict[str, Seen] = field(default_factory=dict)
    more: int = 0  #: runs of further distinct statements, counted but not listed

    def add(self, text: str, sent: Sent) -> None:
        self.count += sent.calls
        seen = self.statements.get(text)
        if seen is None:
            if len(self.statements) >= STATEMENTS:
                self.more += sent.calls
                return
            seen = self.statements[text] = Seen(text[:QUOTED] + ("..." if len(text) > QUOTED else ""))
        seen.count += sent.calls
        if len(seen.sources) < SOURCES:
            seen.sources.append(sent.where)


@dataclass
class Input:
    """One input as read: its path, kind and how many statements it gave."""

    path: str
    kind: str
    statements: int = 0


@dataclass
class Workload:
    """Everything the inputs held, counted."""

    inputs: list[Input] = field(default_factory=list)
    statements: int = 0  #: statements read (a pg_stat_statements row counts its calls)
    unparsed: int = 0  #: of them, those PostgreSQL's parser refused (or too long to read)
    unparsed_examples: list[tuple[str, str]] = field(default_factory=list)  #: (where, text)
    found: dict[Effect, Found] = field(default_factory=dict)
    #: drivers the names of protocol-level prepared statements point to, with how often
    drivers: Counter[str] = field(default_factory=Counter)
    _classify: Classifier = field(default_factory=Classifier)
    _open: dict[str, bool] = field(default_factory=dict)  #: session -> inside a transaction block

    def read(self, path: str, kind: str, entries: Iterable[Sent | Ended]) -> None:
        """Every entry an input yields (inputs.read), counted under `path`."""
        here = Input(path, kind)
        self.inputs.append(here)
        before = self.statements
        for entry in entries:
            if isinstance(entry, Sent):
                self.add(entry)
            elif isinstance(entry, Ended):
                self._open.pop(entry.session, None)
        here.statements = self.statements - before

    def add(self, sent: Sent) -> None:
        self.statements += sent.calls
        try:
            if len(sent.text) > MAX_STATEMENT:
                raise ParseError("too long")
            normalized, statements, plain = self._classify(sent.text)
        except ParseError:
            self.unparsed += sent.calls
            if len(self.unparsed_examples) < EXAMPLES:
                self.unparsed_examples.append((sent.where, sent.text[:QUOTED]))
            return
        if plain and sent.prepared is None:
            return  # no effect, no transaction step: nothing to count, the session's block unchanged
        session = sent.session
        inside = self._open.get(session, False) if session is not None else False
        effects: list[Effect] = []
        for statement in statements:
            effects += statement.effects
            if statement.copy:
                if session is None:
                    effects.append(Effect(Kind.COPY_TRANSACTION_UNKNOWN))
                elif not inside and len(statements) == 1:  # several in one message: one implicit block
                    effects.append(Effect(Kind.COPY_OUTSIDE_TRANSACTION))
            if statement.tx is Tx.BEGIN:
                inside = True
            elif statement.tx is Tx.END:
                inside = False
        if session is not None:
            self._track(session, inside)
        if sent.prepared is not None:
            driver = driver_of(sent.prepared)
            effects.append(Effect(Kind.PROTOCOL_PREPARE, driver))
            self.drivers[driver or "?"] += sent.calls
        for effect in dict.fromkeys(effects):
            found = self.found.get(effect)
            if found is None:
                found = self.found[effect] = Found(effect)
            found.add(normalized, sent)

    def _track(self, session: str, inside: bool) -> None:
        if inside:
            if session not in self._open and len(self._open) >= SESSIONS:
                del self._open[next(iter(self._open))]
            self._open[session] = True
        else:
            self._open.pop(session, None)
