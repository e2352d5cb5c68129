"""A pooler that is already running (`--pooled-dsn`), and optionally its PostgreSQL (`--direct-dsn`).

Nothing is started or stopped. The harness cannot give such a pooler a pool of one, nor reset it
between probes, so the runner does what it can and proves the rest (runner.py): B connects until
its server connection is A's (same pid and backend start), every observation still carries its
proof, each probe starts and ends with DISCARD ALL from both clients, and the probes of such a
pooler run one at a time. Probes create only temporary or uniquely named objects.
"""

from __future__ import annotations

import contextlib
import re
import urllib.parse
from collections.abc import Iterator
from types import TracebackType

import psycopg

from leakcheck.model.errors import ProvisionError, UsageError, one_line
from leakcheck.model.pool_settings import PoolSettings
from leakcheck.model.target import Pooler, PoolerKind
from leakcheck.model.versions import Spec, Version, version_in_output
from leakcheck.provision.base import Endpoint

_SCHEMES = ("postgresql", "postgres")


def check_dsn(dsn: str, option: str) -> str:
    """A postgresql:// URI (both drivers read that form); a one-line UsageError otherwise."""
    example = "give one such as postgresql://app:PASSWORD@pooler.staging:6432/appdb"
    try:
        parts = urllib.parse.urlsplit(dsn.strip())
        parts.port  # noqa: B018 - reading it checks it
    except ValueError as exc:
        raise UsageError(f"{option}: {redacted(dsn)!r} is not a valid URI ({exc}); {example}") from None
    if parts.scheme not in _SCHEMES or not (parts.hostname or "host=" in parts.query):
        raise UsageError(f"{option}: {redacted(dsn)!r} is not a postgresql:// URI; {example}")
    return dsn.strip()


#: A password in a URI's user info, in its query (`?password=`), or as a `password=` keyword.
_SECRETS = (re.compile(r"(://[^/?#@:]*:)[^/?#@]*(@)"), re.compile(r"((?:^|[?&\s])password=)('[^']*'|[^&\s]*)"))


def redacted(dsn: str) -> str:
    """The DSN without its password, for messages and reports (any text: it never raises)."""
    for secret in _SECRETS:
        dsn = secret.sub(lambda m: m.group(1) + "***" + (m.group(2) if m.group(2) == "@" else ""), dsn)
    return dsn


def default_name(dsn: str) -> str:
    """A name for the pooler in ids and keys: its host (and port); the DSN was checked (check_dsn)."""
    parts = urllib.parse.urlsplit(dsn)
    host = (parts.hostname or "pooler").replace(".", "_")
    return f"{host}_{parts.port}" if parts.port else host


class RunningPoolerBackend:
    """Endpoints of servers the user runs: the pooler at `pooled`, PostgreSQL at `direct` (optional)."""

    name = "dsn"

    def __init__(self, pooled: str, direct: str | None = None) -> None:
        self.pooled, self.direct = pooled, direct
        self._version: Version | None = None

    def __enter__(self) -> RunningPoolerBackend:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        return None

    def server_version(self) -> Version:
        """The PostgreSQL version behind the pooler, read through it (once)."""
        if self._version is None:
            try:
                with psycopg.connect(self.pooled, autocommit=True, connect_timeout=10) as conn:
                    row = conn.execute("SELECT current_setting('server_version')", prepare=False).fetchone()
            except psycopg.Error as exc:
                raise ProvisionError(f"could not connect through --pooled-dsn={redacted(self.pooled)} "
                                     f"({one_line(exc, 200)}); check the DSN and that the pooler runs") from None
            found = version_in_output(str(row[0] if row else ""))
            if found is None:
                raise ProvisionError(f"the server behind --pooled-dsn reports no version ({row!r})")
            self._version = found
        return self._version

    def resolve_pg(self, spec: Spec) -> Version:
        return self.server_version()

    def resolve_pooler(self, kind: PoolerKind, spec: Spec) -> Version:
        raise UsageError("--pooled-dsn measures the pooler at that address; leave out --bouncer and --pooler")

    def postgres(self, pg: Version) -> Endpoint:
        if self.direct is None:
            raise ProvisionError("this step needs a direct PostgreSQL session: give --direct-dsn")
        return Endpoint("", 0, dsn=self.direct)

    @contextlib.contextmanager
    def pooler(self, pg: Version, pooler: Pooler, settings: PoolSettings, lane: str = "") -> Iterator[Endpoint]:
        yield Endpoint("", 0, dsn=self.pooled)  # no reset: the runner proves where each client ran

    def describe(self) -> Iterator[str]:
        yield (f"running pooler at {redacted(self.pooled)} (--pooled-dsn): nothing started, no pool of one, "
               "no reset between probes (B connects until it shares A's server connection)")
        if self.direct:
            yield f"its PostgreSQL at {redacted(self.direct)} (--direct-dsn): the direct and shared controls"
        else:
            yield "no --direct-dsn: no controls, and probes that need a direct session are not applicable"
