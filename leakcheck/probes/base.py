"""What a probe is, and the scenario it runs in: two clients whose every step carries its proof.

A proof is the server connection's identity (pg_backend_pid() and its backend_start), read in
the same statement as the observation (`observe`, `prepared`), or inside the same transaction
block as a statement that cannot return it (`run`): no pooler moves a client to another server
connection in the middle of a transaction block.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from leakcheck.drivers.clients import Client, Notification, Row, ServerError
from leakcheck.model.errors import MachineFault, NotApplicable, ProbeError
from leakcheck.model.faults import NO_SQLSTATE, machine_fault
from leakcheck.model.target import Setting
from leakcheck.model.verdicts import Observation, Proof, Route, Scope, ServerId, Slot
from leakcheck.provision.base import Endpoint

#: How many transactions B may open to be handed A's server connection (a_on_another_server).
PLACEMENT_TRIES = 10

#: The identity columns appended to every observation. Epoch microseconds as an integer: proof
#: against TimeZone, DateStyle and extra_float_digits (a float's text before PostgreSQL 14).
IDENTITY = ("pg_backend_pid(), (SELECT (extract(epoch FROM backend_start) * 1000000)::bigint::text "
            "FROM pg_stat_get_activity(pg_backend_pid()))")


def said(value: Any) -> str:
    """A value read from the server, as evidence says it: SQL's NULL for a driver's None (in rows too), else
    its repr."""
    if isinstance(value, list):
        return "[" + ", ".join(said(v) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + ", ".join(said(v) for v in value) + (",)" if len(value) == 1 else ")")
    return "NULL" if value is None else repr(value)


@dataclass(frozen=True)
class Attempt:
    """A statement's value or the error it raised; errors are data in probes."""

    value: Any = None
    error: ServerError | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None

    def state(self, sqlstate: str) -> bool:
        """It failed with this SQLSTATE."""
        return self.error is not None and self.error.sqlstate == sqlstate

    def __str__(self) -> str:
        """In evidence: `error 42P05: ...`, `an error without SQLSTATE: ...`, `success (no value)`, or the value."""
        if self.error is not None:
            return f"{'an ' if self.error.sqlstate == NO_SQLSTATE else ''}error {self.error}"
        return "success (no value)" if self.value is None else said(self.value)


async def attempt(call: Awaitable[Any], *, session_end_observed: bool = False) -> Attempt:
    """The call's value, or the ServerError it raised. Two errors are no result of the feature: a
    pooler's refusal of what the probe needs (a transaction block in statement mode) raises
    NotApplicable; a machine fault (faults.py: disk full, a broken connection...) raises
    MachineFault. `session_end_observed`: the step observes its session being ended, so a session
    end is its answer (idle_in_transaction_timeout)."""
    try:
        return Attempt(value=await call)
    except ServerError as exc:
        refused = NotApplicable.refused(exc)
        if refused is not None:
            raise NotApplicable(refused) from exc
        fault = machine_fault(exc.sqlstate, closed=exc.closed, session_end_observed=session_end_observed)
        if fault is not None:
            raise MachineFault.during(fault, exc) from exc
        return Attempt(error=exc)


@dataclass
class Scenario:
    """Clients A and B on one route, the proofs their steps carried, and a direct session C on demand."""

    a: Client
    b: Client
    route: Route
    third: Callable[[], Awaitable[Client]] | None = None
    proofs: list[Proof] = field(default_factory=list)
    token: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    #: the pooler promises to hand B the server A used last (PgBouncer does): the proofs check it, and a
    #: miss is an error; other poolers hand servers out in their own order (B retries; not applicable)
    placement_promised: bool = True
    #: a hand-over probe's B: the next application, connected only when A has left (hand_over)
    next_b: Callable[[], Awaitable[Client]] | None = None
    #: where A connected (its first item), then, in a fleet (--bouncer-fleet), the fleet's other processes
    addresses: tuple[Endpoint, ...] = ()
    #: H, one more client of a pool leakcheck started that hands out servers in its own order
    #: (Odyssey): it holds a server connection so the probe's pool of two places A and B (keep_a_home)
    holder: Callable[[], Awaitable[Client]] | None = None
    #: the route's word, once a driver's cancel returned after its peer closed the cancel connection,
    #: that no cancel request is in flight any more: what said so, or None (not yet). Absent where the
    #: route cannot tell (a cancel probe then waits its bound): see probes/cancel.py
    cancels_settled: Callable[[], Awaitable[str | None]] | None = None
    _c: Client | None = None
    _h: Client | None = None
    _h_server: ServerId | None = None
    _slot: dict[str, Slot] = field(default_factory=dict)

    def name(self, stem: str) -> str:
        """A name unique to this run (for tables, cursors, channels, statements)."""
        return f"lc_{stem}_{self.token}"

    def _prove(self, client: Client, step: str, pid: Any, started: Any) -> None:
        if started is None:  # pid alone is no proof: pids are reused
            raise ProbeError(f"{client.label}'s backend_start is not visible to its role at {step!r}, so its server "
                             "connection cannot be proven: grant it pg_read_all_stats (leakcheck fixtures does)")
        slot = self._slot.get(client.label, Slot.HOME)
        self.proofs.append(Proof(step, client.label, ServerId(int(pid), str(started)), slot))

    async def observe(self, client: Client, step: str, expr: str) -> Any:
        """The value of one SQL expression, read in the same statement as the client's server identity."""
        rows = await client.query(f"SELECT ({expr}), {IDENTITY}")
        value, pid, started = rows[0]
        self._prove(client, step, pid, started)
        return value

    async def observe_array(self, client: Client, step: str, expr: str) -> list[Any]:
        """`observe` of an array expression (ARRAY(SELECT ...)): a value of another shape (an
        array's text form, `'{a,b}'`, which iterated gives its characters) is a harness error, never
        a verdict."""
        value = await self.observe(client, step, expr)
        if not isinstance(value, list):
            raise ProbeError(f"{client.label}'s driver returned {value!r} for an array at {step!r}, not a list "
                             "(agent protocol 1: arrays as JSON arrays): nothing is measured from a misread value")
        return value

    async def run(self, client: Client, step: str, *statements: str) -> Attempt:
        """Statements in one transaction block that starts with the client's server identity.
        The value is the first column of the last statement's first row; a failure rolls back."""
        begun = await attempt(client.execute("BEGIN"))
        if begun.failed:
            return begun
        identity = await attempt(client.query(f"SELECT {IDENTITY}"))
        if identity.failed:
            await attempt(client.execute("ROLLBACK"))
            return identity
        (pid, started), = [r[:2] for r in identity.value]
        self._prove(client, step, pid, started)
        result = Attempt()
        for sql in statements:
            result = await attempt(client.query(sql))
            if result.failed:
                await attempt(client.execute("ROLLBACK"))
                return result
        done = await attempt(client.execute("COMMIT"))
        if done.failed:
            return done
        rows = result.value or []
        return Attempt(value=rows[0][0] if rows and rows[0] else None)

    async def change(self, client: Client, step: str, *statements: str) -> None:
        """A state change the probe cannot measure without: a failure is a harness error."""
        done = await self.run(client, step, *statements)
        if done.failed:
            raise ProbeError(f"{client.label} could not {step} ({'; '.join(statements)}): {done}")

    async def prepared(self, client: Client, step: str, select: str) -> Attempt:
        """The client's driver runs `SELECT <select>` its prepared way; the statement itself carries
        the proof columns. The value is the first column."""
        got = await attempt(client.prepared(f"SELECT {select}, {IDENTITY}"))
        if got.failed:
            return got
        value, pid, started = got.value[0]
        self._prove(client, step, pid, started)
        return Attempt(value=value)

    async def running(self, client: Client, step: str, marker: str, within: float) -> ServerId:
        """C waits (at most `within` seconds) until the client's statement marked `marker` runs and waits
        (on its lock or sleep: `active` alone also shows during the driver's Parse, and `ClientRead` while
        the backend waits between the messages of the extended protocol, as asyncpg's Parse/Describe
        then Bind/Execute leaves it: a cancel then is dropped), and
        takes the server connection it runs on as the client's proof: a statement that is still
        running cannot return its own identity."""
        c = await self.c()
        deadline = asyncio.get_running_loop().time() + within
        while True:
            rows = await c.query(
                "SELECT pid, (extract(epoch FROM backend_start) * 1000000)::bigint::text FROM pg_stat_activity "
                f"WHERE state = 'active' AND wait_event_type IS NOT NULL AND wait_event_type <> 'Client' "
                f"AND pid <> pg_backend_pid() "
                f"AND position('{marker}' IN query) > 0")
            if rows:
                (pid, started), = [r[:2] for r in rows]
                self._prove(client, step, pid, started)
                return ServerId(int(pid), str(started))
            if asyncio.get_running_loop().time() > deadline:
                raise ProbeError(f"{client.label}'s statement {marker} was not seen running within {within:.0f} s")
            await asyncio.sleep(0.02)

    async def c(self) -> Client:
        """C: a direct PostgreSQL session outside the pool (a third application, or an operator)."""
        if self._c is None:
            if self.third is None:
                raise ProbeError("this route offers no direct session for a third client")
            self._c = await self.third()
        return self._c

    async def _identity(self, client: Client) -> ServerId:
        """The server connection of the client's open transaction block (no proof recorded)."""
        (pid, started), = [r[:2] for r in await client.query(f"SELECT {IDENTITY}")]
        return ServerId(int(pid), str(started))

    async def keep_a_home(self) -> None:
        """Before A's first step of a probe that moves A (a_on_another_server). On a pooler that hands
        out servers in its own order (Odyssey; `holder` given), H opens a transaction and holds one
        server connection of the pool of two, so each of A's transactions runs on the other one,
        HOME; a_on_another_server then has B claim HOME and lets H's go to A. Elsewhere (PgBouncer
        hands B the server A used last; a running pooler's pool size is not known) it does nothing."""
        if self.holder is None or self.route is not Route.TRANSACTION or self._h is not None:
            return
        self._h = await self.holder()
        await self._h.execute("BEGIN")
        self._h_server = await self._identity(self._h)

    async def _claim_home_while_h_holds(self, home: ServerId | None) -> None:
        """B opens its transaction while H holds the pool's other server connection: a pool of two
        leaves B only A's (checked, with every server named); then H commits, so A's next steps can
        only be given the one H held."""
        assert self._h is not None
        await self.b.execute("BEGIN")
        got = await self._identity(self.b)
        if home is not None and got != home:
            await attempt(self.b.execute("COMMIT"))
            raise NotApplicable(f"B was handed {got}, not A's server connection {home}, while H held "
                                f"{self._h_server}: the pooler did not keep to the pool of two server connections "
                                "the probe asked for, so A cannot be moved to another one as this probe needs")
        await attempt(self._h.execute("COMMIT"))

    async def _claim_by_retries(self, home: ServerId | None) -> None:
        """B opens transactions until it is handed A's server connection (PgBouncer hands B the one A
        used last at once: the proofs check it); PLACEMENT_TRIES at most, then not applicable."""
        handed: list[str] = []
        for _ in range(PLACEMENT_TRIES):
            await self.b.execute("BEGIN")
            got = await self._identity(self.b)
            if home is None or got == home:
                return
            handed.append(str(got))
            await attempt(self.b.execute("COMMIT"))
        raise NotApplicable(f"B could not claim A's server connection ({home}) in {PLACEMENT_TRIES} "
                            f"transactions (B was handed {', '.join(sorted(set(handed)))}): the pooler keeps B on "
                            "other server connections (in its own order, or each connected client on its own), so A "
                            "cannot be moved to another one as this probe needs")

    @contextlib.asynccontextmanager
    async def a_on_another_server(self) -> AsyncIterator[None]:
        """B claims A's server by holding a transaction open, so A's steps inside the block run on
        another server connection (the probe needs pool_size=2). A's proofs inside are AWAY,
        B's stay HOME; the classifier checks both. On a pooler that hands out servers in its own
        order, H (keep_a_home) makes B's claim certain; without H (a running pooler) B gets a few
        tries, and then the move cannot be set up: not applicable."""
        a_last = next((p.server for p in reversed(self.proofs) if p.client == self.a.label), None)
        if self.route is not Route.TRANSACTION or self.placement_promised:
            a_last = None  # the controls have sessions of their own; PgBouncer's choice the proofs check
        if self._h is not None:
            await self._claim_home_while_h_holds(a_last)
        else:
            await self._claim_by_retries(a_last)
        try:
            await self.observe(self.b, "holds A's server", "1")
            self._slot[self.a.label] = Slot.AWAY
            try:
                yield
            finally:
                self._slot.pop(self.a.label, None)
        finally:
            await attempt(self.b.execute("COMMIT"))

    async def hand_over(self) -> None:
        """A leaves (disconnects); then B, the next application, connects. A pooler that caches A's
        server connection hands it to B, which the proofs check (a pool of one, one pgpool-II child).
        On the direct route B gets a new backend; on the shared route (the positive control) B takes
        over A's very session, with nothing reset; on the session route (a negative control) A stays
        connected, so B is given a server connection of its own."""
        if self.route is Route.SHARED:
            self.b = self.a.alias("B")
            return
        if self.next_b is None:
            raise ProbeError("this scenario has no next client for a hand-over")
        if self.route is not Route.SESSION:
            await self.a.close()
        self.b = await self.next_b()

    async def close(self) -> None:
        for client in (self._c, self._h):
            if client is not None:
                with contextlib.suppress(Exception):
                    await client.close()


ProbeBody = Callable[[Scenario], Awaitable[Observation]]


@dataclass
class NotYet:
    """A hand-over probe's B before A has left (Scenario.hand_over): using it is the probe's mistake."""

    label: str = "B"
    notifications: list[Notification] = field(default_factory=list)
    statement_names: str = "false"
    settings: tuple[Setting, ...] = ()

    def _early(self) -> ProbeError:
        return ProbeError(f"{self.label} is not connected before A's hand-over (Scenario.hand_over)")

    async def query(self, sql: str) -> list[Row]:
        raise self._early()

    async def execute(self, sql: str) -> None:
        raise self._early()

    async def prepared(self, sql: str) -> list[Row]:
        raise self._early()

    def reported(self, name: str) -> str | None:
        raise self._early()

    async def cancel(self) -> bool:
        raise self._early()

    def alias(self, label: str) -> Client:
        raise self._early()

    async def close(self) -> None:
        return None


class Login:
    """Which role the probe's clients log in as."""

    APP = "app"  #: the application role: no superuser, no inherited privileges
    SUPERUSER = "superuser"  #: only for probes that need it (SET SESSION AUTHORIZATION)


@dataclass(frozen=True)
class Probe:
    """A small declarative unit: a stable id, the state it exercises, and its A/B steps."""

    id: str
    state: str
    body: ProbeBody
    scope: Scope = Scope.SESSION
    pool_size: int = 1  # transaction-mode default_pool_size this probe needs
    security: bool = False  # the state guards data or identity: a leak exposes it
    login: str = Login.APP
    fixtures: bool = False  # uses the roles and tables of provision/postgres/fixtures.py
    #: B connects only after A left (Scenario.hand_over): what a pooler hands the next client
    handover: bool = False
    #: a setting A sends in its startup packet, (name, value): the runner connects A with it, each driver
    #: its own way (drivers/clients.py `connect`); B connects without it
    startup: tuple[str, str] | None = None
    #: about a fleet itself (--bouncer-fleet): in the default selection only when the matrix has a fleet, and
    #: A and B both on its first process (other probes put B on the second, see runner.py)
    fleet: bool = False


def probe(
    id: str, state: str, *, scope: Scope = Scope.SESSION, pool_size: int = 1, security: bool = False,
    login: str = Login.APP, fixtures: bool = False, handover: bool = False,
    startup: tuple[str, str] | None = None, fleet: bool = False,
) -> Callable[[ProbeBody], Probe]:
    def wrap(body: ProbeBody) -> Probe:
        return Probe(id=id, state=state, body=body, scope=scope, pool_size=pool_size, security=security,
                     login=login, fixtures=fixtures, handover=handover, startup=startup, fleet=fleet)

    return wrap
