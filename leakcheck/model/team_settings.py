"""What a team may set in a pooler leakcheck starts (pure, no I/O).

A team's settings reach a pooler as matrix axes (`--bouncer-set`, `--pooler-set`, a matrix file's
`settings`) and, for PgBouncer, as its own ini and the files it `%include`s. Each pooler product
keeps one allow-list (`TeamSettings`, next to its config renderer): the settings that change how it
pools and resets, its timeouts and its logging. Anything else is refused in one line before any
server starts: where it listens, its sockets and files, how clients and the pooler log in, its pool
size, and whatever loads more config (Odyssey's `include`) stay leakcheck's, so a team's settings
can neither widen what listens nor weaken a login. docs/poolers.md lists each product's names.

A few allowed names take SQL the pooler runs on the test server (PgBouncer's `server_reset_query`, a
reset or check query): it runs as whichever role a pool logs in as, the run's superuser too (the
session_authorization probe's pool), so such a value may only reset or check a session (`SAFE_SQL`);
any other SQL could rewrite pg_hba.conf or ALTER SYSTEM SET listen_addresses.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

#: Where the lists are written out for people (a section of docs/poolers.md).
DOCS = "docs/poolers.md, 'Settings a team may set'"

#: The statements a SQL-valued setting may hold, `;`-separated (empty ones too), in any case and spacing:
#: each resets or checks a session, and nothing else.
SAFE_SQL = ("DISCARD ALL", "DISCARD TEMP", "DISCARD TEMPORARY", "DISCARD PLANS", "DISCARD SEQUENCES",
            "DEALLOCATE ALL", "RESET ALL", "CLOSE ALL", "UNLISTEN *", "SELECT pg_advisory_unlock_all()",
            "SET SESSION AUTHORIZATION DEFAULT", "RESET SESSION AUTHORIZATION", "ABORT", "ROLLBACK", "SELECT 1")
_SAFE = frozenset(statement.upper() for statement in SAFE_SQL)


def _normal(statement: str) -> str:
    """One statement as SAFE_SQL spells it: upper case, one space between words, none around parentheses."""
    return re.sub(r" ?([()]) ?", r"\1", " ".join(statement.split())).upper()


def is_safe_sql(value: str) -> bool:
    """Whether every `;`-separated statement of `value` is empty or one of SAFE_SQL."""
    # ASCII only: PostgreSQL's lexer folds and spaces ASCII alone (a dotless ı names another function)
    return value.isascii() and all(not part.strip() or _normal(part) in _SAFE for part in value.split(";"))


@dataclass(frozen=True)
class TeamSettings:
    """One product's allow-list: `allowed` names a team may set; `controlled` says, for the names a
    team might try, why leakcheck keeps them (any other name is refused with a generic reason)."""

    product: str  #: as messages name it: PgBouncer, Odyssey, pgpool-II
    allowed: frozenset[str]
    controlled: Mapping[str, str] = field(default_factory=dict)
    examples: tuple[str, ...] = ()  #: a few allowed names, for the one-line refusal
    #: allowed names whose value is SQL the pooler runs on the test server: SAFE_SQL only
    sql: frozenset[str] = frozenset()
    #: a quote the product's config file takes off a whole value written in it (Odyssey's `"...`")
    quote: str = ""

    def refusal(self, name: str) -> str | None:
        """None when a team may set `name`, else why not and what it may set, for a one-line error."""
        if name in self.allowed:
            return None
        why = self.controlled.get(name, "it is not among the settings leakcheck lets a team change (those change "
                                        "how the pooler pools, resets, times out and logs)")
        others = ", ".join(self.examples)
        return (f"{self.product}'s {name} is not a setting a team may set: {why}. A team may set {self.product}'s "
                f"{others}... ({DOCS} lists them all)")

    def value_refusal(self, name: str, value: str) -> str | None:
        """None when `value` may be given to `name`, else why not, for a one-line error: a SQL-valued
        name's statements must all be SAFE_SQL (the value as the pooler runs it, its file's quotes off)."""
        ran = value[1:-1] if self.quote and len(value) > 1 and value[0] == value[-1] == self.quote else value
        if name not in self.sql or is_safe_sql(ran):
            return None
        return (f"{self.product}'s {name} = {value!r} is SQL the pooler runs on the test server as whichever role "
                f"a pool logs in as (the run's superuser too), so leakcheck takes only statements that reset or "
                f"check a session, separated by ';': {', '.join(SAFE_SQL)} (any case and spacing; empty too)")
