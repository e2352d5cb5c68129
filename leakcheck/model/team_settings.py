"""What a team may set in a pooler leakcheck starts (pure, no I/O).

A team's settings reach a pooler as matrix axes (`--bouncer-set`, `--pooler-set`, a matrix file's
`settings`) and, for PgBouncer, as its own ini and the files it `%include`s. Each pooler product
keeps one allow-list (`TeamSettings`, next to its config renderer): the settings that change how it
pools and resets, its timeouts and its logging. Anything else is refused in one line before any
server starts: where it listens, its sockets and files, how clients and the pooler log in, its pool
size, and whatever loads more config (Odyssey's `include`) stay leakcheck's, so a team's settings
can neither widen what listens nor weaken a login. docs/poolers.md lists each product's names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

#: Where the lists are written out for people (a section of docs/poolers.md).
DOCS = "docs/poolers.md, 'Settings a team may set'"


@dataclass(frozen=True)
class TeamSettings:
    """One product's allow-list: `allowed` names a team may set; `controlled` says, for the names a
    team might try, why leakcheck keeps them (any other name is refused with a generic reason)."""

    product: str  #: as messages name it: PgBouncer, Odyssey, pgpool-II
    allowed: frozenset[str]
    controlled: Mapping[str, str] = field(default_factory=dict)
    examples: tuple[str, ...] = ()  #: a few allowed names, for the one-line refusal

    def refusal(self, name: str) -> str | None:
        """None when a team may set `name`, else why not and what it may set, for a one-line error."""
        if name in self.allowed:
            return None
        why = self.controlled.get(name, "it is not among the settings leakcheck lets a team change (those change "
                                        "how the pooler pools, resets, times out and logs)")
        others = ", ".join(self.examples)
        return (f"{self.product}'s {name} is not a setting a team may set: {why}. A team may set {self.product}'s "
                f"{others}... ({DOCS} lists them all)")
