"""A pooler that is already running (`--pooled-dsn`), and optionally its PostgreSQL (`--direct-dsn`).

Nothing is started or stopped. The harness cannot give such a pooler a pool of one, nor reset it
between probes, so the runner does what it can and proves the rest (run/running_pooler.py): B connects until
its server connection is A's (same pid and backend start), every observation still carries its
proof, each probe starts and ends with DISCARD ALL from both clients, and the probes of such a
pooler run one at a time. Probes create only temporary or uniquely named objects.
"""

from __future__ import annotations

import contextlib
import re
import urllib.parse
from collections.abc import Iterator, Sequence
from types import TracebackType

import psycopg
from psycopg.conninfo import conninfo_to_dict

from leakcheck.model.errors import ProvisionError, UsageError, one_line
from leakcheck.model.pool_settings import PoolSettings
from leakcheck.model.redact import redacted
from leakcheck.model.target import Pooler, PoolerKind
from leakcheck.model.versions import Spec, Version, version_in_output
from leakcheck.provision.base import Endpoint, PoolerKey

_SCHEMES = ("postgresql", "postgres")


def check_dsn(dsn: str, option: str) -> str:
    """A postgresql:// URI (both drivers read that form) that libpq reads, with a bounded
    connect_timeout if any; a one-line UsageError otherwise, without its secrets."""
    example = "give one such as postgresql://app@pooler.staging:6432/appdb (a password after app:)"
    shown = f"'{shown_dsn(dsn)}'"
    try:
        parts = urllib.parse.urlsplit(dsn.strip())
        parts.port  # noqa: B018 - reading it checks it
    except ValueError as exc:  # its port, as Python reads it, may be a piece of a password with a '?' or '/'
        why = str(exc) if "IPv6" in str(exc) else ("its port is not a number from 0 to 65535; percent-encode a "
                                                   "'/', '?', '#' or '@' in the user name or password")
        raise UsageError(f"{option}: {shown} is not a valid URI ({why}); {example}") from None
    if parts.scheme not in _SCHEMES or not (parts.hostname or "host=" in parts.query):
        raise UsageError(f"{option}: {shown} is not a postgresql:// URI; {example}")
    try:
        timeout = conninfo_to_dict(dsn.strip()).get("connect_timeout")  # libpq's own parser; connects nowhere
    except psycopg.Error as exc:
        raise UsageError(f"{option}: libpq cannot read {shown} ({one_line(redacted(str(exc), dsn), 200)}); "
                         f"{example}") from None
    if timeout is not None and not (re.fullmatch(r"\s*[0-9]+\s*", str(timeout)) and int(timeout) > 0):
        raise UsageError(f"{option}: connect_timeout={timeout!r} in {shown} is not valid: leakcheck bounds every "
                         "wait, so give a whole number of seconds above 0 (e.g. connect_timeout=10), or leave it "
                         f"out (then {CONNECT_TIMEOUT})")
    return dsn.strip()


def shown_dsn(dsn: str) -> str:
    """The DSN for a message: its secrets masked, control characters escaped (one line)."""
    return repr(redacted(dsn.strip()))[1:-1]


#: How long a connection to a server the user gave may take, unless its DSN says (connect_timeout).
CONNECT_TIMEOUT = 10


def connect_timeout(dsn: str) -> int:
    """The DSN's own connect_timeout (checked by check_dsn) in seconds, else CONNECT_TIMEOUT."""
    given = conninfo_to_dict(dsn).get("connect_timeout")
    return int(given) if given is not None else CONNECT_TIMEOUT


def without_connect_timeout(dsn: str) -> str:
    """The URI without connect_timeout in its query (asyncpg takes it as its own `timeout`)."""
    base, _, query = dsn.partition("?")
    kept = [item for item in query.split("&")
            if item and urllib.parse.unquote(item.partition("=")[0]).strip() != "connect_timeout"]
    return f"{base}?{'&'.join(kept)}" if kept else base


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
                timeout = connect_timeout(self.pooled)
                with psycopg.connect(self.pooled, autocommit=True, connect_timeout=timeout) as conn:
                    row = conn.execute("SELECT current_setting('server_version')", prepare=False).fetchone()
            except psycopg.Error as exc:
                raise ProvisionError(f"could not connect through --pooled-dsn={shown_dsn(self.pooled)} "
                                     f"({one_line(redacted(str(exc), self.pooled), 200)}); check the DSN and that "
                                     "the pooler runs") from None
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
        yield (f"running pooler at {shown_dsn(self.pooled)} (--pooled-dsn): nothing started, no pool of one, "
               "no reset between probes (B connects until it shares A's server connection)")
        if self.direct:
            yield f"its PostgreSQL at {shown_dsn(self.direct)} (--direct-dsn): the direct and shared controls"
        else:
            yield "no --direct-dsn: no controls, and probes that need a direct session are not applicable"

    def warm(self, pgs: Sequence[Version], poolers: Sequence[PoolerKey]) -> None:
        """Nothing: the servers are the user's, already running."""

    def gone(self, pg: Version, pooler: PoolerKey | None = None) -> str | None:
        """None: the servers are not ours to watch; a probe keeps its timeout."""
        return None
