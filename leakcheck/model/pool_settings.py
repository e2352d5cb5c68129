"""What a probe asks of any pooler: the pool mode and size (pure; every layer shares it)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class PoolMode(StrEnum):
    """A pooler's pool mode, in PgBouncer's words (Odyssey and pgpool-II map them to theirs)."""

    TRANSACTION = "transaction"
    SESSION = "session"
    STATEMENT = "statement"


@dataclass(frozen=True)
class PoolSettings:
    """What a probe asks of the pooler: the pool mode and size. Everything else comes from the
    cell's settings axes, the team's ini, or the version's default."""

    mode: PoolMode = PoolMode.TRANSACTION
    pool_size: int = 1
    #: startup parameters the clients' driver sends that PgBouncer must ignore to let it in (pgjdbc's
    #: extra_float_digits): added to `ignore_startup_parameters`, whatever the team's ini or axes say
    ignored_startup: tuple[str, ...] = ()
