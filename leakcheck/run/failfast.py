"""A server that failed to start or stopped answering once is not tried again for every later test of its cell.

The first failure reaches its test in full (the server's log tail); later tests of that
PostgreSQL version, or of that (PostgreSQL, PgBouncer) cell, fail at once with one short line
naming the test that shows it. A huge message (e.g. shutil.Error listing every file of a copy
that failed) is cut so it cannot fill the report.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import NoReturn

from leakcheck.model.errors import LeakcheckError, StartError
from leakcheck.model.pool_settings import PoolSettings
from leakcheck.model.target import Pooler, PoolerKind
from leakcheck.model.versions import Spec, Version
from leakcheck.provision.base import Backend, Endpoint, PoolerKey

#: Characters of a failure's message kept (LeakcheckErrors are already short: 25 log lines at most).
MAX_MESSAGE = 2000


class NotAvailable(StartError):
    """A server this run already failed to start (the first failure has the details)."""


def shorten(exc: Exception) -> Exception:
    """`exc`, or a StartError carrying its first MAX_MESSAGE characters when it is longer."""
    text = str(exc)
    if isinstance(exc, LeakcheckError) or len(text) <= MAX_MESSAGE:
        return exc
    return StartError(f"{type(exc).__name__}: {text[:MAX_MESSAGE]} ... ({len(text) - MAX_MESSAGE} characters cut)")


class FailFast:
    """A Backend wrapper remembering, per PostgreSQL version and per cell, the first failure to start."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self.name = backend.name
        self._local = threading.local()  # lanes run in threads: each knows its own current test
        self._failed: dict[tuple[str, ...], str] = {}

    def __enter__(self) -> FailFast:
        self._backend = self._backend.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._backend.__exit__(kind, exc, tb)

    def resolve_pg(self, spec: Spec) -> Version:
        return self._backend.resolve_pg(spec)

    def resolve_pooler(self, kind: PoolerKind, spec: Spec) -> Version:
        return self._backend.resolve_pooler(kind, spec)

    @property
    def current(self) -> str:
        """The test running now in this thread (named in the short message of later failures)."""
        return str(getattr(self._local, "current", "an earlier test"))

    @current.setter
    def current(self, name: str) -> None:
        self._local.current = name

    def describe(self) -> Iterator[str]:
        return self._backend.describe()

    def postgres(self, pg: Version) -> Endpoint:
        what = f"PostgreSQL {pg}"
        self._check((what,), what)
        try:
            return self._backend.postgres(pg)
        except Exception as exc:
            self._raise_remembered((what,), exc)

    def warm(self, pgs: Sequence[Version], poolers: Sequence[PoolerKey]) -> None:
        """Start these servers together when the backend can (it only saves time; failures show later)."""
        self._backend.warm(pgs, poolers)

    def gone(self, pg: Version, pooler: PoolerKey | None = None) -> str | None:
        """The backend's answer (the native one watches its servers: see its gone(); others answer None)."""
        return self._backend.gone(pg, pooler)

    @contextlib.contextmanager
    def pooler(self, pg: Version, pooler: Pooler, settings: PoolSettings, lane: str = "") -> Iterator[Endpoint]:
        if pooler.kind.started:  # a running pooler's PostgreSQL may be out of reach
            self.postgres(pg)  # a PostgreSQL failure is remembered as one, not as a pooler failure
        cell = (f"PostgreSQL {pg}", pooler.label())
        what = f"{pooler.label()} (in front of PostgreSQL {pg})"
        self._check(cell, what)
        with contextlib.ExitStack() as stack:
            try:
                endpoint = stack.enter_context(self._backend.pooler(pg, pooler, settings, lane))
            except Exception as exc:
                self._raise_remembered(cell, exc)
            yield endpoint

    def _check(self, key: tuple[str, ...], what: str) -> None:
        first = self._failed.get(key)
        if first is not None:
            raise NotAvailable(f"{what} is not available: it failed in {first}")

    def _raise_remembered(self, key: tuple[str, ...], exc: Exception) -> NoReturn:
        """Remember the first failure of `key`, then raise it (shortened when huge)."""
        summary = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        self._failed.setdefault(key, f"{self.current} (see that failure): {summary}")
        short = shorten(exc)
        if short is exc:
            raise exc
        raise short from None
