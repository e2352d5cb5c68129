"""What a probe is, and the scenario it runs in (two clients and their pid proofs)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..clients import Client, ServerError
from ..verdicts import Observation, PidCheck, Relation, Route

PID_SQL = "SELECT pg_backend_pid()"


@dataclass
class Scenario:
    """Clients A and B on one route, plus the pid proofs taken along the way."""

    a: Client
    b: Client
    route: Route
    checks: list[PidCheck] = field(default_factory=list)
    token: str = field(default_factory=lambda: uuid.uuid4().hex[:8])

    def name(self, stem: str) -> str:
        """A name unique to this run (for tables, cursors, channels, statements)."""
        return f"lc_{stem}_{self.token}"

    async def pid(self, client: Client) -> int:
        return int(await client.fetchval(PID_SQL))

    async def shared(self, step: str) -> int:
        """Prove A and B are on one server connection now (the usual transaction-mode case)."""
        pa, pb = await self.pid(self.a), await self.pid(self.b)
        self.checks.append(PidCheck(step, (self.a.label, pa), (self.b.label, pb), Relation.SAME))
        return pa

    def record(self, step: str, first: tuple[Client, int], second: tuple[Client, int], pooled: Relation) -> None:
        """Record a pid relation the probe arranged itself (e.g. A moved to another server)."""
        (ca, pa), (cb, pb) = first, second
        self.checks.append(PidCheck(step, (ca.label, pa), (cb.label, pb), pooled))

    @contextlib.asynccontextmanager
    async def a_on_another_server(self) -> AsyncIterator[None]:
        """B claims A's server by holding a transaction open, so A's statements inside the block
        run on another server connection (the probe needs pool_size=2). Records both pid proofs."""
        a_before = await self.pid(self.a)
        await self.b.execute("BEGIN")
        try:
            b_holding = await self.pid(self.b)
            self.record("B holds A's server", (self.a, a_before), (self.b, b_holding), Relation.SAME)
            yield
            a_after = await self.pid(self.a)
            self.record("A moved", (self.a, a_before), (self.a, a_after), Relation.DIFFERENT)
        finally:
            await self.b.execute("COMMIT")


@dataclass(frozen=True)
class Attempt:
    """A statement's value or the error it raised; errors are data in probes."""

    value: Any = None
    error: ServerError | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None

    def __str__(self) -> str:
        return f"error {self.error}" if self.error else repr(self.value)


async def attempt(call: Awaitable[Any]) -> Attempt:
    try:
        return Attempt(value=await call)
    except ServerError as exc:
        return Attempt(error=exc)


ProbeBody = Callable[[Scenario], Awaitable[Observation]]


@dataclass(frozen=True)
class Probe:
    """A small declarative unit: a stable id, the state it exercises, and its A/B steps."""

    id: str
    state: str
    body: ProbeBody
    pool_size: int = 1  # transaction-mode default_pool_size this probe needs


def probe(id: str, state: str, pool_size: int = 1) -> Callable[[ProbeBody], Probe]:
    def wrap(body: ProbeBody) -> Probe:
        return Probe(id=id, state=state, body=body, pool_size=pool_size)

    return wrap
