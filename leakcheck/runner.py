"""Run one probe for one target and turn what it saw into an Outcome."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from .clients import Client, Driver, connect
from .ini import PoolMode, PoolSettings
from .probes.base import Probe, Scenario
from .provision.base import Backend, Endpoint
from .verdicts import Observation, Outcome, PidCheck, Route, Verdict, classify
from .versions import Version

#: Seconds one probe may take, connections included, before it is an error.
PROBE_TIMEOUT = 30.0
#: Pool size for the session-mode control (two clients each keep a server).
SESSION_POOL = 2


@dataclass(frozen=True)
class Target:
    """Where a probe runs: a PostgreSQL, a PgBouncer (none for direct), a route, a driver."""

    pg: Version
    bouncer: Version | None
    route: Route
    driver: Driver

    def test_id(self, probe_id: str) -> str:
        parts = [f"pg{self.pg}"]
        if self.bouncer is not None:
            parts.append(f"pgbouncer{self.bouncer}")
        if self.route is not Route.TRANSACTION:
            parts.append(self.route.value)
        return "-".join([*parts, self.driver.value, probe_id])


@contextlib.contextmanager
def _endpoint(backend: Backend, probe: Probe, target: Target) -> Iterator[Endpoint]:
    if target.route is Route.DIRECT:
        yield backend.postgres(target.pg)
        return
    assert target.bouncer is not None, "a pooled route needs a PgBouncer version"
    if target.route is Route.TRANSACTION:
        settings = PoolSettings(PoolMode.TRANSACTION, probe.pool_size)
    else:
        settings = PoolSettings(PoolMode.SESSION, max(SESSION_POOL, probe.pool_size))
    with backend.bouncer(target.pg, target.bouncer, settings) as endpoint:
        yield endpoint


async def _close(*clients: Client) -> None:
    for client in clients:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.close(), 5)


async def _measure(probe: Probe, target: Target, endpoint: Endpoint) -> tuple[Observation, tuple[PidCheck, ...]]:
    a = await connect(target.driver, "A", endpoint)
    try:
        b = await connect(target.driver, "B", endpoint)
    except BaseException:
        await _close(a)
        raise
    scenario = Scenario(a=a, b=b, route=target.route)
    try:
        observation = await probe.body(scenario)
    finally:
        await _close(a, b)
    return observation, tuple(scenario.checks)


def run_probe(backend: Backend, probe: Probe, target: Target) -> Outcome:
    """Measure; any harness failure becomes an ERROR outcome, never a verdict."""

    def outcome(verdict: Verdict, evidence: str, details: tuple[tuple[str, str], ...] = ()) -> Outcome:
        return Outcome(
            probe=probe.id, pg=str(target.pg), bouncer=str(target.bouncer or ""), route=target.route,
            driver=target.driver.value, verdict=verdict, evidence=evidence, details=details,
        )

    try:
        with _endpoint(backend, probe, target) as endpoint:
            observation, checks = asyncio.run(asyncio.wait_for(_measure(probe, target, endpoint), PROBE_TIMEOUT))
    except TimeoutError:
        return outcome(Verdict.ERROR, f"the probe did not finish within {PROBE_TIMEOUT:.0f} s")
    except Exception as exc:  # noqa: BLE001 - the harness reports any failure as an error outcome
        return outcome(Verdict.ERROR, f"the harness failed: {type(exc).__name__}: {exc}".strip())
    verdict, evidence = classify(target.route, checks, observation)
    return outcome(verdict, evidence, observation.details)
