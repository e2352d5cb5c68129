"""The harness never calls a state isolated without proof, and its controls never cry wolf."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import cast

import pytest

from leakcheck.model.pool_settings import PoolSettings
from leakcheck.model.target import Driver, Pooler, PoolerKind, Route, Target
from leakcheck.model.verdicts import Scope, Verdict
from leakcheck.model.versions import Version
from leakcheck.probes import PROBES
from leakcheck.probes.base import Probe
from leakcheck.provision.base import Backend, Endpoint, PoolerKey
from leakcheck.provision.native import NativeBackend
from leakcheck.run.runner import run_probe
from tests.support.servers import DRIVERS, TEST_PG, Measure

pytestmark = pytest.mark.servers


class NoPooler:
    """Hands out the direct PostgreSQL address where a PgBouncer was asked for."""

    def __init__(self, real: NativeBackend) -> None:
        self.real = real

    def postgres(self, pg: Version) -> Endpoint:
        return self.real.postgres(pg)

    @contextlib.contextmanager
    def pooler(self, pg: Version, pooler: Pooler, settings: PoolSettings, lane: str = "") -> Iterator[Endpoint]:
        yield self.real.postgres(pg)

    def gone(self, pg: Version, pooler: PoolerKey | None = None) -> str | None:
        return None  # it does not watch its servers (Backend.gone)


@pytest.mark.parametrize("driver", DRIVERS, ids=str)
# A fleet's own probes (cancel_routed) need a fleet to run at all; without one they are not applicable
# before anything is measured, so this fake pooler cannot exercise them (tests/servers/test_fleet.py does).
@pytest.mark.parametrize("probe", [p for p in PROBES if not p.fleet], ids=lambda p: p.id)
def test_without_a_shared_server_a_probe_is_an_error_never_isolated(
    native: NativeBackend, measure: Measure, probe: Probe, driver: Driver
) -> None:
    if (probe.id, driver.value) in DRIVER_LACKS:
        pytest.skip(f"{driver} has no call {probe.id} needs: not applicable before anything is measured")
    pg = measure.pg(TEST_PG[0])
    fake = cast(Backend, NoPooler(native))
    outcome = run_probe(fake, probe, Target(pg, Pooler(PoolerKind.PGBOUNCER, pg), Route.TRANSACTION, driver))
    assert outcome.verdict is Verdict.ERROR, outcome.evidence
    assert "did not share the server" in outcome.evidence


#: Probes a native driver cannot run at all (its API lacks the call, in its words: not applicable before any
#: step), so the fake pooler cannot exercise them through it: psycopg runs each of them.
DRIVER_LACKS = {("bind_unprepared", "asyncpg"), ("parse_close_batch", "asyncpg"), ("cancel_own_protocol_32", "asyncpg")}


#: One probe per probe module, i.e. per way of observing state; the matrix's own controls
#: (test_control on the direct and shared routes) measure every probe on every run.
#: statement_timeout: a setting read back and its effect (B's query cancelled);
#: advisory_xact_lock: transaction-scoped, so isolated on both routes (the shared control is no "always leaks");
#: listen_notify: a third session and sentinel notifications; with_hold_cursor: a server object in pg_cursors;
#: protocol_prepare: the drivers' own prepared statements, proven really prepared; set_role_privileged: data
#: only a role may read.
REPRESENTATIVE = ("statement_timeout", "advisory_xact_lock", "listen_notify", "with_hold_cursor",
                  "protocol_prepare", "set_role_privileged")


@pytest.mark.parametrize("driver", DRIVERS, ids=str)
@pytest.mark.parametrize("probe", REPRESENTATIVE)
def test_a_probe_gives_both_answers_isolated_apart_and_leaks_on_one_session(
    measure: Measure, probe: str, driver: Driver
) -> None:
    chosen = next(p for p in PROBES if p.id == probe)
    apart = measure(chosen, TEST_PG[0], None, driver, Route.DIRECT)
    assert apart.verdict is Verdict.ISOLATED, apart.evidence
    together = measure(chosen, TEST_PG[0], None, driver, Route.SHARED)
    assert together.verdict is chosen.control_expectation(Route.SHARED), together.evidence
    if chosen.scope is Scope.SESSION:
        assert together.verdict is Verdict.LEAKS  # the probe can say "leaks" where state is shared
