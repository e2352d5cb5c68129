"""What a probe is: a small declarative unit with a stable id, the state it exercises, and its A/B
steps over a Scenario (probes/scenario.py), and what a step gives back (`Attempt`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from leakcheck.drivers.interface import Client, CopyIn, Notification, Piped, Pipelined, Row, ServerError
from leakcheck.model.errors import MachineFault, NotApplicable, ProbeError
from leakcheck.model.faults import NO_SQLSTATE, machine_fault
from leakcheck.model.target import Route, Setting
from leakcheck.model.verdicts import Observation, Scope, Verdict
from leakcheck.provision.host.proc_sockets import Ends

if TYPE_CHECKING:
    from leakcheck.probes.scenario import Scenario

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


ProbeBody = Callable[["Scenario"], Awaitable[Observation]]


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

    async def begin(self) -> None:
        raise self._early()

    async def commit(self) -> None:
        raise self._early()

    async def rollback(self) -> None:
        raise self._early()

    async def free(self, sql: str) -> None:
        raise self._early()

    async def bind(self, name: str) -> list[Row]:
        raise self._early()

    async def copy_in(self, copy: CopyIn) -> None:
        raise self._early()

    async def pipeline(self, commands: tuple[Piped, ...]) -> Pipelined:
        raise self._early()

    def protocol(self) -> str | None:
        raise self._early()

    def reported(self, name: str) -> str | None:
        raise self._early()

    def connections(self) -> set[Ends]:
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
    #: the newest protocol version A asks for at connect (libpq 18's max_protocol_version): the runner connects
    #: A so, each driver its own way; a driver that cannot ask, or a pooler refusing the connect, is not applicable
    protocol: str | None = None

    def control_expectation(self, route: Route) -> Verdict:
        """What a control route must measure for this probe: the negative controls (direct sessions,
        session mode) isolated; the positive control (one shared session) leaks for session state."""
        if route is Route.SHARED and self.scope is Scope.SESSION:
            return Verdict.LEAKS
        return Verdict.ISOLATED


def probe(
    id: str, state: str, *, scope: Scope = Scope.SESSION, pool_size: int = 1, security: bool = False,
    login: str = Login.APP, fixtures: bool = False, handover: bool = False,
    startup: tuple[str, str] | None = None, fleet: bool = False, protocol: str | None = None,
) -> Callable[[ProbeBody], Probe]:
    def wrap(body: ProbeBody) -> Probe:
        return Probe(id=id, state=state, body=body, scope=scope, pool_size=pool_size, security=security,
                     login=login, fixtures=fixtures, handover=handover, startup=startup, fleet=fleet,
                     protocol=protocol)

    return wrap
