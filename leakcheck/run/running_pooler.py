"""Probing a pooler leakcheck did not start (`--pooled-dsn`): no pool of one, no reset between probes.

So the harness makes sure of what it cannot configure, and proves it:
- B connects until its server connection is A's (same pid and backend start), within a bound;
  every observation of the probe still carries its proof, and the classifier checks them all;
- each probe starts and ends with DISCARD ALL from both clients, so no state of one probe meets
  the next (and none is left on the pooler's server connections);
- a probe that needs leakcheck's roles and tables, or a superuser, is *not applicable* unless the
  database has them (`leakcheck fixtures` creates them; see the README).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from leakcheck.drivers.interface import Client, ServerError
from leakcheck.model.errors import NotApplicable, ProbeError
from leakcheck.model.faults import NO_SQLSTATE
from leakcheck.model.verdicts import ServerId
from leakcheck.probes.base import IDENTITY, Login, Probe
from leakcheck.provision.postgres.fixtures import PRESENT

#: How many times, and for how long, B may connect again to get A's server connection.
ALIGN_ATTEMPTS = 40
ALIGN_SECONDS = 10.0


async def _identity(client: Client) -> ServerId:
    (pid, started), = [tuple(r[:2]) for r in await client.query(f"SELECT {IDENTITY}")]
    return ServerId(int(pid), str(started))


async def discard(*clients: Client) -> None:
    """DISCARD ALL from each client (outside any transaction block): resets every setting, role,
    prepared statement, cursor, temp table, advisory lock and LISTEN of the server it runs on.
    A client whose connection the probe ended (e.g. idle_in_transaction_session_timeout) has no
    server connection left to clean."""
    for client in clients:
        try:
            await client.execute("DISCARD ALL")
        except ServerError as exc:
            if exc.sqlstate.startswith("08") or exc.sqlstate == NO_SQLSTATE:  # the connection is gone
                continue
            raise ProbeError(f"{client.label} could not DISCARD ALL through the running pooler ({exc}); "
                             "leakcheck cannot leave its server connections clean") from exc


async def check_needs(probe: Probe, client: Client) -> None:
    """NotApplicable when the database lacks what the probe uses (checked by a query, not assumed)."""
    if not probe.fixtures and probe.login != Login.SUPERUSER:
        return
    (present, superuser, bypass), = [tuple(r[:3]) for r in await client.query(
        f"SELECT {PRESENT}, r.rolsuper, r.rolbypassrls FROM pg_roles r WHERE r.rolname = current_user")]
    if probe.fixtures and not present:
        raise NotApplicable("this probe uses leakcheck's test roles and tables, which this database does not "
                            "have: create them with `leakcheck fixtures --dsn=URI` as a superuser (docs/poolers.md: "
                            "a running pooler by DSN)")
    if probe.fixtures and probe.login == Login.APP and (superuser or bypass):
        # Row security and grants do not apply to such a role: B would see rows or rights as a "leak".
        raise NotApplicable("this probe logs in as an application role (no superuser, no BYPASSRLS), and the "
                            f"--pooled-dsn user is {'a superuser' if superuser else 'BYPASSRLS'}: give an "
                            "application role's DSN (`leakcheck fixtures --dsn=URI --role=ROLE` prepares it)")
    if probe.login == Login.SUPERUSER and not superuser:
        raise NotApplicable("this probe needs a superuser login (SET SESSION AUTHORIZATION) and the --pooled-dsn "
                            "user is none")


async def share_a_server(a: Client, connect_b: Callable[[], Awaitable[Client]]) -> Client:
    """B, connected until its next statement runs on A's server connection; ProbeError after the bound."""
    seen: list[str] = []
    deadline = time.monotonic() + ALIGN_SECONDS
    for _ in range(ALIGN_ATTEMPTS):
        mine = await _identity(a)
        b = await connect_b()
        try:
            theirs = await _identity(b)
        except BaseException:
            await b.close()
            raise
        if theirs == mine:
            return b
        seen.append(str(theirs.pid))
        await b.close()
        if time.monotonic() > deadline:
            break
    raise ProbeError(
        f"B never got A's server connection through the running pooler: {len(seen)} connections in "
        f"{ALIGN_SECONDS:.0f} s gave pid(s) {', '.join(dict.fromkeys(seen))} while A was on {mine.pid}. "
        "It may not pool in transaction mode, or other clients keep its servers busy; try a quieter time"
    )
