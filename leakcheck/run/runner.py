"""Run one probe for one target and turn what it saw into an Outcome."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass

from leakcheck.drivers.agents import client as agents
from leakcheck.drivers.agents.catalogue import shipped
from leakcheck.drivers.agents.team import PREFIX as TEAM_PREFIX
from leakcheck.drivers.clients import connect
from leakcheck.drivers.interface import Client, ServerError
from leakcheck.model.errors import (
    DriverRefused,
    LeakcheckError,
    MachineFault,
    NotApplicable,
    ProbeError,
    ProvisionError,
    one_line,
)
from leakcheck.model.faults import machine_fault
from leakcheck.model.pool_settings import PoolMode, PoolSettings
from leakcheck.model.target import Driver, Pooler, Route, Target
from leakcheck.model.verdicts import Observation, Outcome, Proof, ServerId, Verdict, classify, unshared
from leakcheck.probes.base import Login, NotYet, Probe
from leakcheck.probes.outcomes import Stalled
from leakcheck.probes.scenario import Scenario
from leakcheck.probes.witness import Witness, witness_for
from leakcheck.provision.base import USER, Backend, Endpoint, PoolerKey
from leakcheck.provision.console import query_postgres
from leakcheck.provision.postgres.fixtures import APP_ROLE
from leakcheck.provision.products import product
from leakcheck.run import running_pooler
from leakcheck.run.watch import Gone, ServerLost, run_watched

#: Seconds one probe may take, connections included, before it is an error.
PROBE_TIMEOUT = 30.0
#: The runner's bound on one client's close. An agent's close can take longer (agents.CLOSE_BOUND: a call it gave up
#: on, the close's answer, then its stop); one cut short here stops its agent (AgentClient.close), so nothing is left
#: running, and a probe's three closes after a step stalled to its bound still end within PROBE_TIMEOUT: a longer
#: bound would turn a measured stall into an error.
CLOSE_WAIT = 5.0
#: How PgBouncer's refusal of a startup parameter reads ("unsupported startup parameter: search_path",
#: "unsupported options startup parameter: parameter cannot be changed").
STARTUP_REFUSAL = "startup parameter"
#: How a pooler's refusal of a newer protocol version reads (PgBouncer before 1.23: "bad packet header:
#: '0000002f00030002'", the 3.2 startup packet it cannot read).
PROTOCOL_REFUSAL = ("bad packet header", "protocol")
#: Pool size for the session-mode control (two clients each keep a server).
SESSION_POOL = 2


def subject_mode(pooler: Pooler | None) -> PoolMode:
    """The pool mode probes run in: the cell's pool_mode axis, else the team's ini, else transaction
    (pgpool-II has no transaction pooling: it runs as it is, in its session mode)."""
    if pooler is None:
        return PoolMode.TRANSACTION
    if not pooler.kind.record.transaction_pooling:
        return PoolMode.SESSION
    given = pooler.setting("pool_mode") or team_value(pooler, "pool_mode")
    try:
        return PoolMode((given or "transaction").strip().lower())
    except ValueError:
        return PoolMode.TRANSACTION  # the pooler itself refuses the value when it starts


def team_value(pooler: Pooler, name: str) -> str | None:
    """The value the team's own config file (--bouncer-ini) gives a setting, where its product reads one."""
    if not pooler.config or not pooler.kind.started:
        return None
    read = product(pooler.kind).team_value
    return read(pooler.config, name) if read is not None else None


def pooler_lane(target: Target) -> str:
    """Which of a cell's pooler processes a run uses: one per driver (a pair's both) and route (the probes
    and the session control may ask for the same pool settings, e.g. pgpool-II's only mode)."""
    return f"{target.drivers}/{target.route.value}"


def pool_settings(probe: Probe, target: Target) -> PoolSettings | None:
    """What the pooler runs with for this probe on this target's route (None: no pooler)."""
    if target.route is Route.TRANSACTION:
        mode = subject_mode(target.pooler)
        # In session mode a pool of one makes B wait for A to leave: give each client its own place
        # (a hand-over's B connects once A has left: a pool of one makes the pooler hand it A's server).
        size = probe.pool_size if mode is not PoolMode.SESSION or probe.handover else max(SESSION_POOL, probe.pool_size)
        return PoolSettings(mode, size, ignored_startup(target.driver, target.b_app.driver))
    if target.route is Route.SESSION:
        return PoolSettings(PoolMode.SESSION, max(SESSION_POOL, probe.pool_size),
                            ignored_startup(target.driver, target.b_app.driver))
    return None


@dataclass(frozen=True)
class ProbePlan:
    """What one probe runs on, worked out once per probe (run_probe) and passed to each step that asks:
    its target (with its route) and the pool settings of the pooler on that route (None: no pooler)."""

    probe: Probe
    target: Target
    settings: PoolSettings | None

    @property
    def pooler_key(self) -> PoolerKey | None:
        """The pooler process the probe uses (a backend's key: see Backend.pooler), None on no pooler."""
        target = self.target
        if self.settings is None or target.pooler is None:
            return None
        return (target.pg, target.pooler, self.settings, pooler_lane(target))


def plan_of(probe: Probe, target: Target) -> ProbePlan:
    """The probe's plan on this target (pool_settings computed here, once)."""
    return ProbePlan(probe, target, pool_settings(probe, target))


def ignored_startup(*drivers: Driver) -> tuple[str, ...]:
    """The startup parameters the drivers send that PgBouncer must be told to ignore (pgjdbc's
    extra_float_digits): each driver's, once, in order (a pair's two drivers share one pooler)."""
    found = [name for d in dict.fromkeys(drivers) if (agent := shipped(d.value)) is not None
             for name in agent.spec.ignored_startup]
    return tuple(dict.fromkeys(found))


@contextlib.contextmanager
def _endpoint(backend: Backend, plan: ProbePlan) -> Iterator[Endpoint]:
    key = plan.pooler_key
    if key is None:
        assert plan.settings is None, "a pooled route needs a pooler"
        yield backend.postgres(plan.target.pg)
        return
    with backend.pooler(*key) as endpoint:
        yield endpoint


async def _close(*clients: Client) -> None:
    """Each client closed, each given CLOSE_WAIT; leakcheck's own drivers close within milliseconds."""
    for client in clients:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.close(), CLOSE_WAIT)


def is_running_pooler(target: Target) -> bool:
    """A pooler leakcheck did not start (--pooled-dsn): see run/running_pooler.py."""
    return target.route is Route.TRANSACTION and target.pooler is not None and not target.pooler.kind.started


async def _connect_a(probe: Probe, target: Target, where: Endpoint) -> Client:
    """A, with the probe's startup parameter or protocol version if it has one. A pooler refusing that
    parameter at connect (PgBouncer: "unsupported startup parameter"), or that version, is measured, in
    the pooler's own words: it cannot be sent there (not applicable). Any other connect failure stays an
    error."""
    if probe.protocol is not None:
        try:
            return await connect(target.driver, "A", where, target.driver_settings, protocol=probe.protocol)
        except NotApplicable:
            raise
        except Exception as exc:
            words = one_line(exc, 200)
            if not any(w in words for w in PROTOCOL_REFUSAL):
                raise
            raise NotApplicable(f"A's connect asking for protocol {probe.protocol} was refused: {words}") from exc
    if probe.startup is None:
        return await connect(target.driver, "A", where, target.driver_settings)
    name, value = probe.startup
    try:
        return await connect(target.driver, "A", where, target.driver_settings, startup=probe.startup)
    except Exception as exc:
        words = one_line(exc, 200)
        if STARTUP_REFUSAL not in words:
            raise
        raise NotApplicable(f"A's connect with the startup parameter {name}={value} was refused: {words}") from exc


def names_a_timer(probe: Probe) -> bool:
    """Whether the probe's startup parameter names a timeout: it may set a timer on A's own session, which the
    witness, reading the server's, databases' and roles' settings, cannot see; the pool is then never judged kept
    before the bound. A setting of A's or B's driver (`options=-c ..._timeout=...`) turns the early look off by
    itself, whatever it names (`pool_kept`)."""
    return any("timeout" in text.lower() for text in probe.startup or ())


async def _measure(
    plan: ProbePlan, endpoint: Endpoint, direct: Callable[[], Endpoint], witness: Witness | None
) -> tuple[Observation, tuple[Proof, ...]]:
    probe, target = plan.probe, plan.target
    role = USER if probe.login == Login.SUPERUSER else APP_ROLE
    if role == USER and any(d.value.startswith(TEAM_PREFIX) for d in (target.driver, target.b_app.driver)):
        raise NotApplicable("this probe logs in as the test server's superuser, and a team's agent (cmd:PATH) is "
                            "never given its password: it is a client like any other, on the application role")
    # A fleet: A on its first process; B on the second, or on A's for a probe about the fleet itself.
    addresses = endpoint.members or (endpoint,)
    where = addresses[0].as_user(role)
    b_where = (addresses[0] if probe.fleet else addresses[1 % len(addresses)]).as_user(role)
    running = is_running_pooler(target)
    settings = target.driver_settings  # the cell's --driver-set values: every client of A's driver has them
    # B's application: its own driver and settings in a mixed pair (--pairs), else A's. A, C (a third, direct
    # session) and H (Odyssey's holder, one more client of A's pool) run A's; O, the harness's, psycopg.
    b_app = target.b_app

    def connect_b(at: Endpoint) -> Awaitable[Client]:
        return connect(b_app.driver, "B", at, b_app.settings)

    a = await _connect_a(probe, target, where)
    try:
        if endpoint.dsn:  # a server the user gave (--pooled-dsn, --direct-dsn): has it what the probe uses?
            await running_pooler.check_needs(probe, a)
        if running:
            await running_pooler.discard(a)
            b = await running_pooler.share_a_server(a, lambda: connect_b(where))
        # The positive control: B drives A's very session (a pair's too: one connection is one driver, A's).
        # Elsewhere B is its own application.
        elif target.route is Route.SHARED:
            b = a.alias("B")
        elif probe.handover:  # B connects when A has left (Scenario.hand_over)
            b = NotYet()
        else:
            b = await connect_b(b_where)
    except BaseException:
        await _close(a)
        raise

    async def third() -> Client:
        try:
            return await connect(target.driver, "C", direct().as_user(APP_ROLE), settings)
        except ProvisionError as exc:
            raise NotApplicable(f"this probe needs a third, direct session: {exc}") from exc

    promised = target.pooler is None or target.pooler.kind.record.promises_placement
    holder = (lambda: connect(target.driver, "H", where, settings)) if may_hold(plan) else None
    observer = ((lambda: connect(Driver.PSYCOPG, "O", where.as_user(APP_ROLE)))
                if shares_servers(plan) and not running else None)
    scenario = Scenario(a=a, b=b, route=target.route, witness=witness, third=third, placement_promised=promised,
                        next_b=lambda: connect_b(where), addresses=addresses, holder=holder,
                        cancels_settled=cancels_settled(target, endpoint), observer=observer,
                        pool_kept=None if names_a_timer(probe) else pool_kept(target, endpoint, witness),
                        resets_configured=resets_after_transaction(target),
                        clients_are_agents=not (target.driver.native and b_app.driver.native))
    try:
        try:
            observation = await probe.body(scenario)
        except Stalled as stall:  # the pool stalled: what the application saw ends the probe
            observation = Observation(evidence="the probe ended there", stalled=str(stall))
        except DriverRefused as refused:  # a driver refused a value its server reported
            lost = refusal_outcome(refused, scenario.proofs)
            if lost is None:
                raise
            observation = lost
        if running:
            await running_pooler.discard(a, b)
    except BaseException:
        if running:  # a failed probe must not leave its state on the team's pooler either (best effort)
            with contextlib.suppress(Exception):
                await running_pooler.discard(a, b)
        raise
    finally:
        await scenario.close()
        await _close(a, b, scenario.b)
    return scenario.finish(observation), tuple(scenario.proofs)


def refusal_outcome(refused: DriverRefused, proofs: Sequence[Proof]) -> Observation | None:
    """What a driver's refusal of a value its server reported (a catalogue refusal) means. None, not applicable:
    a driver refused the value its own application set itself, or A's refused before B acted (only A's own
    setting can have reached it). Else the value reached an application that never set it (B's driver was
    told A's DateStyle), and that application lost its connection: the probe ends there, a break
    (Fact.DISCONNECTED where its driver closes the connection). A break needs the proof that both applications
    were on a server connection they share: the refused step itself proves nothing (it never returned its
    identity), so an application refusing before any step of its own was proven is an error (ProbeError), not
    a break on the other's proofs alone; an earlier proven step of it is the proof (`classify` checks it)."""
    if refused.own or (refused.who == "A" and not any(p.client == "B" for p in proofs)):
        return None
    proven = {p.client for p in proofs}
    if not {"A", "B"} <= proven:
        other = "A" if refused.who == "B" else "B"
        unproven = refused.who if refused.who not in proven else other
        raise ProbeError(f"{refused}, before {unproven} proved any server connection: no proof that {refused.who} "
                         f"shared a server connection with {other}, so the refusal is no measured break") from refused
    return Observation(evidence="the probe ended there", broke=str(refused),
                       disconnected=str(refused) if refused.closed else None)


def shares_servers(plan: ProbePlan) -> bool:
    """Whether connected clients share server connections on this target's route (transaction or statement
    mode): then an observer through the pooler is on the clients' server (Scenario.read)."""
    target, settings = plan.target, plan.settings
    return (target.route is Route.TRANSACTION and target.pooler is not None and settings is not None
            and settings.mode is not PoolMode.SESSION)


def resets_after_transaction(target: Target) -> bool:
    """Whether the pooler runs a statement of its own on a server after each transaction (PgBouncer's
    server_reset_query_always, the axis or the team's ini), so no session state survives an autocommit step."""
    pooler = target.pooler
    name = pooler.kind.record.resets_setting if pooler is not None else ""
    if target.route is not Route.TRANSACTION or pooler is None or not name:
        return False
    given = pooler.setting(name) or team_value(pooler, name)
    return (given or "0").strip().lower() in ("1", "yes", "on", "true")


def cancels_settled(target: Target, endpoint: Endpoint) -> Callable[[], Awaitable[str | None]] | None:
    """The route's word that no cancel request is in flight any more (Scenario.cancels_settled), where it has
    one: PostgreSQL itself (the direct and shared routes), which closes a cancel connection once it signalled
    the backend; a PgBouncer leakcheck started, whose SHOW POOLS (1.18+) counts a forwarded request until
    PostgreSQL closed its connection. None elsewhere (a server the user gave, a fleet whose processes forward
    to each other, Odyssey, pgpool-II): the probe waits its bound."""
    if endpoint.dsn or endpoint.members:
        return None
    if target.pooler is None or target.route in (Route.DIRECT, Route.SHARED):
        async def postgres() -> str | None:
            return "that peer was PostgreSQL, which closes it once it signalled the backend"
        return postgres
    kind = target.pooler.kind
    counter = product(kind).cancels_in_flight if kind.started else None
    if counter is None:
        return None
    count_cancels, teller = counter
    untold = False

    async def pooler() -> str | None:
        nonlocal untold
        if untold:
            return None
        count = await asyncio.to_thread(count_cancels, endpoint)
        untold = count is None  # its console cannot say (PgBouncer before 1.18): the bound it is, without asking again
        return f"{teller} then counted no cancel request in flight" if count == 0 else None
    return pooler


def pool_kept(target: Target, endpoint: Endpoint,
              witness: Witness | None) -> Callable[[set[int], float, Client], Awaitable[str | None]] | None:
    """The route's word that the pooler keeps server connections for a client while the waiting client itself
    waits (Scenario.pool_kept): a pooler leakcheck started in transaction mode from its own config, for applications
    at their defaults (nothing of theirs sets a timer on the session), whose console says so (its product's
    `kept_for`: PgBouncer's), where PostgreSQL has no timer that ends an idle session (the witness's
    `idle_timers`). What does not change within a probe is read once per probe: PostgreSQL's timers at the first
    look, the pooler's settings by its `kept_for`. None elsewhere: a waiting client is known stalled at its
    bound."""
    pooler = target.pooler
    if (endpoint.dsn or endpoint.members or pooler is None or not pooler.kind.started or witness is None
            or target.route is not Route.TRANSACTION or target.a_app.settings or target.b_app.settings):
        return None
    if pooler.config:
        # A team's ini: its [users] entries may give a user PgBouncer's own timers (1.24+: query_timeout,
        # idle_transaction_timeout, client_idle_timeout; 1.25+ transaction_timeout), which neither SHOW CONFIG nor
        # SHOW USERS shows; its [databases] (connect_query, a session timer on every server connection) never
        # reach PgBouncer (team_ini.REPLACED_SECTIONS). What its console cannot say, the bound decides.
        return None
    kept_for = product(pooler.kind).kept_for
    if kept_for is None:
        return None
    watch = kept_for(endpoint)
    timers: list[str] | None = None

    async def console(pids: set[int], bound: float, waiter: Client) -> str | None:
        nonlocal timers
        if timers is None:
            timers = witness.idle_timers()
        if timers:
            return None
        ends = waiter.connections()  # on the loop's thread, which alone uses the client's socket (psycopg's dup)
        return await asyncio.to_thread(watch, pids, bound, ends)
    return console


def may_hold(plan: ProbePlan) -> bool:
    """Whether H, one more client of the pool, may hold a server connection to place A and B
    (Scenario.keep_a_home): only on a pooler leakcheck started with the probe's pool size in transaction
    mode that hands out servers in its own order (Odyssey; PgBouncer hands B the one A used last), unless a
    setting of its pool's shape is an axis (H could wait for a server that never comes free)."""
    pooler, settings = plan.target.pooler, plan.settings
    if pooler is None or not pooler.kind.record.may_hold or settings is None:
        return False
    shape = pooler.kind.record.pool_shape
    return settings.mode is PoolMode.TRANSACTION and not any(pooler.setting(name) for name in shape)


def run_probe(backend: Backend, probe: Probe, target: Target, earlier: set[ServerId] | None = None) -> Outcome:
    """Measure; any harness failure becomes an ERROR outcome, never a verdict.

    `earlier`: the server identities earlier probes on the same pooler saw (updated here). A probe
    whose proofs name one of them did not start from fresh server connections: an error.
    """

    def outcome(verdict: Verdict, evidence: str, observation: Observation | None = None) -> Outcome:
        return Outcome(
            probe=probe.id, target=target, verdict=verdict, evidence=evidence,
            details=observation.details if observation else (), facts=observation.facts if observation else (),
            security=probe.security,
        )

    plan = plan_of(probe, target)
    used: list[Endpoint] = []
    agents.next_probe()  # a driver that names statements per process gets fresh agents (drivers/agents/client.py)
    gone, probing = watching(backend, plan), False
    try:
        with _endpoint(backend, plan) as endpoint:
            used.append(endpoint)
            if not is_running_pooler(target):
                backend.postgres(target.pg)  # started before the clients connect

            def direct() -> Endpoint:
                return backend.postgres(target.pg)

            witness = witness_of(backend, target)
            probing = True  # from here a server that ends, ends during the probe
            measured = run_watched(_measure(plan, endpoint, direct, witness), PROBE_TIMEOUT, gone)
    except ServerLost as exc:
        return outcome(Verdict.ERROR, str(exc))
    except TimeoutError:
        silent = who_stopped(backend, target, used[0] if used else None)
        return outcome(Verdict.ERROR, f"the probe did not finish within {PROBE_TIMEOUT:.0f} s: {silent}")
    except NotApplicable as exc:
        return outcome(Verdict.NOT_APPLICABLE, str(exc))
    except Exception as exc:  # noqa: BLE001 - the harness reports any failure as an error outcome
        lost = gone() if probing else None  # the driver's words ("server conn crashed?") are not the cause
        if lost is not None:
            return outcome(Verdict.ERROR, str(ServerLost.during_probe(lost)))
        refused = NotApplicable.refused(exc)
        if refused is not None and target.route is Route.TRANSACTION:
            return outcome(Verdict.NOT_APPLICABLE, refused)
        return outcome(Verdict.ERROR, failure(exc))
    observation, proofs = measured
    lost = gone()  # a step's failure the probe recorded may be a server that just ended: never a verdict then
    if lost is not None:
        return outcome(Verdict.ERROR, str(ServerLost.during_probe(lost)))
    if earlier is not None and not is_running_pooler(target):  # a running pooler keeps its servers
        reused = sorted({str(p.server) for p in proofs if p.server in earlier})
        earlier.update(p.server for p in proofs)
        if reused:
            return outcome(Verdict.ERROR, f"server connection(s) {', '.join(reused)} already served an earlier "
                           "probe on this pooler: the reset did not give fresh server connections")
    verdict, evidence = decide(plan, proofs, observation)
    return outcome(verdict, evidence, observation if verdict not in (Verdict.ERROR, Verdict.NOT_APPLICABLE) else None)


def decide(plan: ProbePlan, proofs: tuple[Proof, ...], observation: Observation) -> tuple[Verdict, str]:
    """The verdict of what the probe measured: `classify`'s; where it is an error because the pooler never let A
    and B share a server connection, not applicable, but a lost write stays what it is (model/verdicts.py
    unshared), with its facts."""
    verdict, evidence = classify(plan.target.route, proofs, observation)
    apart = never_shared(plan, proofs) if verdict is Verdict.ERROR else None
    return unshared(observation, apart) if apart is not None else (verdict, evidence)


def witness_of(backend: Backend, target: Target) -> Witness:
    """This lane's witness on the target's PostgreSQL (probes/witness.py), ready for a new probe. A running
    pooler has one through --direct-dsn (config refuses --pooled-dsn without it): no probe proves its sharing
    on a client's word, so a backend without PostgreSQL is an error here."""
    direct = backend.postgres(target.pg)
    witness = witness_for(direct.as_user(USER).for_harness())
    witness.start()
    return witness


def watching(backend: Backend, plan: ProbePlan) -> Gone:
    """What the watcher asks while the probe runs (run/watch.py): the backend's word on the target's PostgreSQL
    and on the pooler process the probe uses. A backend that does not watch (containers, a running pooler) always
    answers None, and a running pooler (--pooled-dsn, not ours) is never asked: their probes keep PROBE_TIMEOUT."""
    if is_running_pooler(plan.target):
        return lambda: None
    pg, key = plan.target.pg, plan.pooler_key
    return lambda: backend.gone(pg, key)


def who_stopped(backend: Backend, target: Target, endpoint: Endpoint | None) -> str:
    """After a probe's timeout, which server it used does not answer a `SELECT 1` (connect and query
    each bounded, see provision/console.py): its PostgreSQL first, then the pooler in front of it."""
    checks: list[tuple[str, Endpoint]] = []
    if not is_running_pooler(target):
        try:
            direct = backend.postgres(target.pg)
        except (LeakcheckError, OSError) as exc:
            return one_line(exc, 300)
        checks.append((f"PostgreSQL {target.pg} at {direct.host}:{direct.port}", direct))
    if endpoint is not None and target.pooler is not None and target.route in (Route.TRANSACTION, Route.SESSION):
        checks.append((f"{target.pooler.kind.product} {target.pooler.label()} at {endpoint.host}:{endpoint.port}",
                       endpoint))
    for what, where in checks:
        try:
            query_postgres(where)
        except Exception as exc:  # noqa: BLE001 - any failure to answer names the server
            return f"{what} stopped answering ({one_line(exc, 160)})"
    return "every server it used still answers (a probe too slow for the machine?)"


def failure(exc: Exception) -> str:
    """An error outcome's evidence: a machine fault says so (faults.py), anything else is the harness's."""
    if isinstance(exc, MachineFault):
        return str(exc)
    fault = machine_fault(exc.sqlstate, closed=exc.closed) if isinstance(exc, ServerError) else None
    if fault is not None:
        return str(MachineFault.during(fault, exc))
    return f"the harness failed: {type(exc).__name__}: {exc}".strip()


def never_shared(plan: ProbePlan, proofs: tuple[Proof, ...]) -> str | None:
    """Measured: a pooler in session mode (pgpool-II has no other) gave A and B different server
    connections at every step while both were connected, so the probe cannot run through it. In
    transaction or statement mode (a pool of one) that is a harness failure, never this. For a
    hand-over probe in session mode: the pooler did not hand B (a pool of one) the server A left."""
    probe, target, settings = plan.probe, plan.target, plan.settings
    a = {p.server for p in proofs if p.client == "A"}
    b = {p.server for p in proofs if p.client == "B"}
    fleet = target.pooler.fleet if target.pooler is not None else ()
    if target.route is Route.TRANSACTION and fleet and not probe.fleet and a and b and not a & b:
        return (f"A on the fleet's first process (PgBouncer {fleet[0]}) and B on its second (PgBouncer {fleet[1]}) "
                f"never shared a server connection (A on {', '.join(sorted(map(str, a)))}; B on "
                f"{', '.join(sorted(map(str, b)))}): each process of a fleet has its own pool, so this probe "
                "cannot run across them")
    if target.route is not Route.TRANSACTION or settings is None or settings.mode is not PoolMode.SESSION:
        return None
    if len(a) != 1 or len(b) != 1 or a == b:  # in session mode a client that changed servers lost its session
        return None
    kind = target.pooler.kind.product if target.pooler else "the pooler"
    if probe.handover:
        where = f"A on {_servers(a)}; B on {_servers(b)}"
        return (f"{kind} did not hand B the server connection A left ({where}), although its pool holds one: "
                "what A left behind cannot be observed through it (e.g. connection_cache=off)")
    return (f"{kind} in session mode gave A and B different server connections while both were connected "
            f"(A on {', '.join(sorted(map(str, a)))}; B on {', '.join(sorted(map(str, b)))}): it does not share "
            "a server connection between connected clients, so this probe cannot run through it")


def _servers(servers: set[ServerId]) -> str:
    """Server identities with their backend start: a reused pid is told apart."""
    return ", ".join(sorted(f"{s} (started {s.started})" for s in servers))
