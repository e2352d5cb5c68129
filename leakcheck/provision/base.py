"""The one Protocol every provisioning backend fills (native processes, containers)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Protocol

from leakcheck.model.pool_settings import PoolSettings
from leakcheck.model.target import Pooler, PoolerKind
from leakcheck.model.versions import Spec, Version

#: The database and the superuser every backend creates on its PostgreSQL servers (the other
#: roles and objects the probes use are in fixtures.py).
DBNAME = "leakcheck"
USER = "leakcheck"
OTHER_ROLE = "leakcheck_other"
#: track_activity_query_size on every PostgreSQL leakcheck starts (bytes; a postmaster setting): the witness
#: finds a step by the tag at the end of its statement in pg_stat_activity, which PostgreSQL's default (1024)
#: cuts off a long statement (discovery's snapshot of a session is about 1,700 bytes).
QUERY_SIZE = 16384

#: One pooler process of a run: (its PostgreSQL, the pooler, the pool settings it runs with, its lane).
PoolerKey = tuple[Version, Pooler, PoolSettings, str]


@dataclass(frozen=True)
class Endpoint:
    """Where a client connects: always 127.0.0.1 (or a container this run started), or a Unix socket in
    the run's own folder (a fleet's processes)."""

    host: str
    port: int
    user: str = USER
    dbname: str = DBNAME
    #: (role, password) for every role the run created; servers ask for them (SCRAM).
    credentials: tuple[tuple[str, str], ...] = ()
    #: a URI the user gave (--pooled-dsn, --direct-dsn): used as it is, for every role
    dsn: str = ""
    #: a fleet (--bouncer-fleet): each process at its own address (its Unix socket folder in the run's
    #: folder, on the fleet's port), in the fleet's order; `host:port` is the port they share
    members: tuple[Endpoint, ...] = ()
    #: the server's Unix socket folder, which only its user (and root) may enter and where it trusts them: the
    #: harness's own session (the witness) connects there (no TCP stack between its looks and the server); no
    #: client is ever given it. Empty where there is none (containers, a server the user gave).
    own_socket: str = ""

    @property
    def password(self) -> str:
        return dict(self.credentials).get(self.user, "")

    def conninfo(self, dbname: str | None = None) -> str:
        if self.dsn:
            return self.dsn
        secret = f" password={_value(self.password)}" if self.password else ""
        return (f"host={_value(self.host)} port={self.port} user={_value(self.user)} "
                f"dbname={_value(dbname or self.dbname)}{secret}")

    def for_harness(self) -> Endpoint:
        """Where the harness's own session connects: the server's own socket where there is one, else here."""
        return replace(self, host=self.own_socket, own_socket="") if self.own_socket and not self.members else self

    def as_user(self, user: str) -> Endpoint:
        """The same server for another of the run's roles (a DSN's own user serves every role)."""
        return self if self.dsn else replace(self, user=user, members=tuple(m.as_user(user) for m in self.members))


def _value(text: str) -> str:
    """A libpq connection-string value: quoted where a space, quote or backslash would end or change it
    (a Unix socket folder under a TMPDIR with a space)."""
    if text and not any(c in text for c in " '\\"):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def new_credentials(*roles: str) -> tuple[tuple[str, str], ...]:
    """A fresh random password per role, made for one run and never stored."""
    return tuple((role, secrets.token_urlsafe(24)) for role in roles)


@dataclass(frozen=True)
class Binary:
    """A resolved server program: its exact version and the argv prefix that runs it."""

    version: Version
    argv: tuple[str, ...]
    origin: str  # one phrase for reports: "cache", "PATH", "built from pgbouncer-1.24.1.tar.gz", ...


class Backend(Protocol):
    """Provides PostgreSQL servers and PgBouncer instances for a run.

    A backend is a context manager: leaving it stops every server it started and removes
    every temporary file, whatever happened inside (success, failure, Ctrl-C).
    """

    name: str

    def __enter__(self) -> Backend: ...

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...

    def resolve_pg(self, spec: Spec) -> Version:
        """The exact PostgreSQL version `spec` resolves to (fetching it if needed)."""
        ...

    def resolve_pooler(self, kind: PoolerKind, spec: Spec) -> Version:
        """The exact version of that pooler `spec` resolves to (fetching or building it if needed)."""
        ...

    def postgres(self, pg: Version) -> Endpoint:
        """A running PostgreSQL of that version (started on first use, kept for the run)."""
        ...

    def pooler(
        self, pg: Version, pooler: Pooler, settings: PoolSettings, lane: str = ""
    ) -> AbstractContextManager[Endpoint]:
        """That pooler (its version, its settings axes, the team's config) in front of `postgres(pg)`,
        run with the pool mode and size `settings` ask for, whose pool holds no server connection yet.

        Each use starts from fresh server connections, so no state carries over between probes
        (a running pooler reached by DSN cannot promise that: see provision/dsn_backend.py).
        One pooler process serves each (pg, pooler, settings, lane) for the run: uses of one lane
        never overlap, different lanes may run at the same time.
        """
        ...

    def describe(self) -> Iterator[str]:
        """Lines for the run header: what was resolved, from where."""
        ...

    def warm(self, pgs: Sequence[Version], poolers: Sequence[PoolerKey]) -> None:
        """Start these servers together, ahead of their first use, where the backend can (only a head
        start: a failure shows at that first use). A backend that cannot does nothing."""
        ...

    def gone(self, pg: Version, pooler: PoolerKey | None = None) -> str | None:
        """Why the PostgreSQL `pg` (or the pooler process `pooler`) a probe uses no longer serves, else
        None. The runner's watcher (run/watch.py) asks it every 0.1 s while a probe runs; a backend that
        does not watch its servers always answers None."""
        ...
