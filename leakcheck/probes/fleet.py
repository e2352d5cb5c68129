"""A fleet's own probe: a cancel request that the kernel hands to another process of the fleet.

PgBouncer processes sharing a port (so_reuseport) each take some of the new connections, and a
cancel request is a new connection: it may reach a process that does not know the query's key.
With peering (`peer_id` and `[peers]`) that process forwards it to the process that does.
"""

from __future__ import annotations

import asyncio
import time

from leakcheck.drivers.agents.client import AgentClient
from leakcheck.drivers.cancel import send_cancel_request
from leakcheck.drivers.clients import AsyncpgClient
from leakcheck.drivers.interface import Client
from leakcheck.model.errors import NotApplicable, ProbeError
from leakcheck.model.target import Route
from leakcheck.model.verdicts import Observation, Scope
from leakcheck.probes.base import probe
from leakcheck.probes.scenario import Scenario

#: How long A's statement sleeps: a cancel that arrives ends it sooner.
SLEEP = 4
#: Seconds C waits to see A's statement running before the cancel is sent.
RUNNING_TIMEOUT = 5.0


async def _until_running(s: Scenario, marker: str) -> None:
    """C (a direct session) sees A's statement inside pg_sleep (wait_event PgSleep), within RUNNING_TIMEOUT:
    `active` alone also shows while the driver's Parse runs, and a cancel that lands after it, while the
    server waits for the Bind, is dropped by PostgreSQL (a lost cancel the fleet did not cause)."""
    c = await s.c()
    deadline = time.monotonic() + RUNNING_TIMEOUT
    while time.monotonic() < deadline:
        rows = await c.query(f"SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND wait_event = "
                             f"'PgSleep' AND query LIKE '%{marker}%' AND pid <> pg_backend_pid()")
        if rows[0][0]:
            return
        await asyncio.sleep(0.05)
    raise ProbeError(f"A's statement was not seen running within {RUNNING_TIMEOUT:.0f} s")


async def cancel_key(client: Client) -> tuple[int, int]:
    """The (pid, secret key) the client's login was given: asyncpg keeps them on its protocol object;
    an agent tells them when its hello offers `cancel_key` (node-postgres, pgx). NotApplicable, saying
    why, for the others: psycopg's libpq does not make them public (PQgetCancel is opaque)."""
    if isinstance(client, AsyncpgClient):
        protocol = client.conn._protocol
        return int(protocol.backend_pid), int(protocol.backend_secret)
    if isinstance(client, AgentClient):
        return await client.cancel_key()
    raise NotApplicable("this driver does not show the cancel key its login was given, so its cancel cannot be "
                        "sent to another process: run cancel_routed with asyncpg or an agent that answers "
                        "cancel_key (node-postgres, pgx)")


@probe("cancel_routed", "a cancel request that reaches another process of the fleet", scope=Scope.TRANSACTION,
       fleet=True)
async def cancel_routed(s: Scenario) -> Observation:
    key = await cancel_key(s.a)
    if s.route is Route.TRANSACTION and len(s.addresses) < 2:
        raise NotApplicable("one pooler process: cancel_routed needs a fleet (--bouncer-fleet=2)")
    # The subject: the cancel reaches the fleet's second process. The controls: A's own server or process.
    to = s.addresses[1] if s.route is Route.TRANSACTION else s.addresses[0]
    marker = s.name("sleep")
    await s.c()  # C (who watches A's statement) connects first: its start is not taken from A's pg_sleep
    # A runs a long statement through the first process (its proof taken in the same transaction block).
    sleeping = asyncio.ensure_future(s.run(s.a, "sleeps", f"SELECT pg_sleep({SLEEP}) /* {marker} */"))
    try:
        await _until_running(s, marker)
        # A's cancel request (A's pid and key) arrives at `to`.
        started = time.monotonic()
        await send_cancel_request(to.host, to.port, *key)
        delivered_while_running = not sleeping.done()  # the peer closed the cancel connection before A's end
        done = await sleeping
    finally:
        if not sleeping.done():
            sleeping.cancel()
    took = time.monotonic() - started
    # B then runs on the same server connection: the cancel left it usable (and proves the sharing).
    await s.observe(s.b, "runs after A", "1")
    where = f"{to.host}:{to.port}"
    if done.state("57014"):
        return Observation(f"A's statement was cancelled {took:.1f} s after its cancel reached {where}")
    if done.failed:
        return Observation(f"A's cancel reached {where} and A's statement failed otherwise: {done}", broke=str(done))
    # Lost only on that measurement: pg_sleep returned normally, so it ran its whole SLEEP, and the cancel had
    # been delivered (its peer had closed the connection) while it still slept.
    if not delivered_while_running:
        raise ProbeError(f"A's cancel was delivered to {where} only after A's pg_sleep({SLEEP}) had ended "
                         f"({took:.1f} s after it was sent): the machine was too slow for the cancel to be measured")
    return Observation(f"A's cancel reached {where} and was lost: A's pg_sleep({SLEEP}) ran to its end "
                       f"({took:.1f} s)", lost=True)


PROBES = (cancel_routed,)
