"""What advice reads of a cell: the pooler (kind, version, settings), PostgreSQL's version, the driver."""

from __future__ import annotations

from dataclasses import dataclass

from leakcheck.model.products import Advice
from leakcheck.model.target import Driver, PoolerKind
from leakcheck.model.verdicts import Outcome
from leakcheck.model.versions import Version


@dataclass(frozen=True)
class AdviceCell:
    """An outcome's cell as advice reads it (its pooler flattened); a view of the outcome's Target."""

    kind: PoolerKind | None
    version: Version | None  #: the pooler's; None for a running pooler (--pooled-dsn) or none
    settings: tuple[tuple[str, str], ...]
    config: str  #: the team's --bouncer-ini, "" for the harness's own
    pg: Version
    driver: Driver

    @classmethod
    def of(cls, outcome: Outcome) -> AdviceCell:
        p = outcome.pooler
        return cls(p.kind if p else None, p.version if p else None, p.settings if p else (), p.config if p else "",
                   outcome.pg, outcome.driver)

    @property
    def product(self) -> str:
        return self.kind.product if self.kind else "the pooler"

    @property
    def advice(self) -> Advice:
        """What the reports tell of its product where the fix is the product's own setting."""
        return self.kind.record.advice if self.kind else Advice()

    @property
    def is_bouncer(self) -> bool:
        return self.kind is PoolerKind.PGBOUNCER

    @property
    def is_running_pooler(self) -> bool:
        return self.kind is not None and not self.kind.started

    def setting(self, name: str) -> str | None:
        return dict(self.settings).get(name)

    @property
    def pool_mode(self) -> str | None:
        return self.setting("pool_mode")

    def bouncer_before(self, *parts: int) -> bool:
        """A PgBouncer whose version is known and older than `parts`."""
        return self.is_bouncer and self.version is not None and self.version.parts < parts

    def bouncer_since(self, *parts: int) -> bool:
        """A PgBouncer whose version is known and at least `parts`."""
        return self.is_bouncer and self.version is not None and self.version.parts >= parts

    @property
    def named(self) -> str:
        """`PgBouncer 1.18.0`, `Odyssey`, `the pooler`."""
        return f"{self.product} {self.version}" if self.version else self.product

    @property
    def ini(self) -> str:
        return "your --bouncer-ini" if self.config else "pgbouncer.ini"


def driver_off(cell: AdviceCell) -> str:
    """The cell's driver's own switch for protocol-level prepares."""
    if cell.driver == Driver.ASYNCPG:
        return "turn asyncpg's statement cache off (`statement_cache_size=0`)"
    if cell.driver == Driver.PSYCOPG:
        return "turn psycopg's prepares off (`prepare_threshold=None`)"
    return f"turn {cell.driver.value}'s protocol-level prepares off (its own setting)"


def reset_tail(cell: AdviceCell) -> str:
    """PgBouncer's blunt instrument, with its trade-off (appended to session-state leaks)."""
    name = cell.kind.record.resets_setting if cell.kind else ""
    if not name:
        return ""
    return (f" Or `{name} = 1` (`DISCARD ALL` after each transaction): the next client starts "
            "clean, but the client that set the state loses it, and each transaction costs a round trip.")
