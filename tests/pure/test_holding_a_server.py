"""Where H, one more client of the pool, may hold a server connection to place A and B (a *_moved probe)."""

from __future__ import annotations

from leakcheck.model.target import Driver, Route, Target
from leakcheck.model.versions import Version
from leakcheck.probes import PROBES
from leakcheck.run.runner import may_hold, plan_of
from tests.pure.outcomes import pooler

MOVED = next(p for p in PROBES if p.id == "timezone_moved")


def target(kind: str, version: str, settings: tuple[tuple[str, str], ...] = (),
           route: Route = Route.TRANSACTION) -> Target:
    return Target(Version.parse("16.14"), pooler(kind, version, settings), route, Driver("psycopg"))


def test_h_holds_a_server_on_odyssey_in_transaction_mode_with_the_probes_pool_size() -> None:
    assert may_hold(plan_of(MOVED, target("odyssey", "1.5.2")))


def test_h_never_holds_where_pgbouncer_places_b_or_pgpool_keeps_sessions() -> None:
    assert not may_hold(plan_of(MOVED, target("pgbouncer", "1.24.1")))
    assert not may_hold(plan_of(MOVED, target("pgpool", "4.3.5")))


def test_h_never_holds_when_a_team_gives_odyssey_its_own_pool_mode_or_size() -> None:
    assert not may_hold(plan_of(MOVED, target("odyssey", "1.5.2", (("pool", "session"),))))
    assert not may_hold(plan_of(MOVED, target("odyssey", "1.5.2", (("pool_size", "4"),))))


def test_h_never_holds_on_the_session_control() -> None:
    assert not may_hold(plan_of(MOVED, target("odyssey", "1.5.2", route=Route.SESSION)))
