"""Lanes: which probe runs share a pooler (one after another) and which may run side by side."""

import pytest

from leakcheck.model.errors import UsageError
from leakcheck.model.target import NATIVE_DRIVERS, Driver, Pooler, PoolerKind, Route, Target
from leakcheck.model.versions import Version
from leakcheck.probes import PROBES
from leakcheck.probes.base import Probe
from leakcheck.run.lanes import (
    MAX_POOLERS_PER_PG,
    MAX_RUNS,
    agent_lanes_per_core,
    check_capacity,
    default_jobs,
    lane_of,
    runs_agents,
)

PG, B = Version((16, 14)), Pooler(PoolerKind.PGBOUNCER, Version((1, 24, 1)))
ONE = next(p for p in PROBES if p.id == "timezone")
TWO = next(p for p in PROBES if p.pool_size == 2)


def test_probes_of_one_cell_driver_and_pool_share_a_lane_and_so_run_one_after_another() -> None:
    target = Target(PG, B, Route.TRANSACTION, Driver.PSYCOPG)
    assert lane_of(ONE, target) == lane_of(next(p for p in PROBES if p.id == "search_path"), target)


def test_drivers_routes_pool_sizes_and_pooler_settings_get_lanes_of_their_own() -> None:
    base = Target(PG, B, Route.TRANSACTION, Driver.PSYCOPG)
    lanes = {
        lane_of(ONE, base),
        lane_of(ONE, Target(PG, B, Route.TRANSACTION, Driver.ASYNCPG)),
        lane_of(ONE, Target(PG, B, Route.SESSION, Driver.PSYCOPG)),
        lane_of(ONE, Target(PG, None, Route.DIRECT, Driver.PSYCOPG)),
        lane_of(TWO, base),
        lane_of(ONE, Target(PG, Pooler(PoolerKind.PGBOUNCER, B.version, (("max_prepared_statements", "0"),)),
                            Route.TRANSACTION, Driver.PSYCOPG)),
    }
    assert len(lanes) == 6


@pytest.mark.parametrize(("cores", "lanes"), [(None, 4), (1, 4), (2, 8), (3, 8), (64, 8)])
def test_with_agents_the_default_is_four_lanes_per_core_and_never_more_than_eight(
    cores: int | None, lanes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: cores)
    assert default_jobs(agents=True) == lanes


@pytest.mark.parametrize(("cores", "lanes"), [(None, 6), (1, 6), (2, 12), (3, 12), (64, 12)])
def test_in_process_drivers_alone_get_six_lanes_per_core_and_never_more_than_twelve(
    cores: int | None, lanes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: cores)
    assert default_jobs() == lanes


@pytest.mark.parametrize(("cores", "lanes"), [(1, 2), (2, 4), (4, 8), (64, 8)])
def test_an_agent_that_asks_two_lanes_per_core_gets_them_and_never_more_than_eight(
    cores: int, lanes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: cores)
    assert default_jobs(agents=True, per_core=2) == lanes


@pytest.mark.parametrize(("drivers", "per_core"), [
    (("sqlx",), 4), (("hibernate",), 2), (("hibernate", "hibernate", "sqlx"), 3), (("cmd:/opt/agent",), 4),
    (("psycopg", "pgx-v5", "django", "sqlx", "prisma", "hibernate"), 4),
])
def test_a_matrix_runs_the_lanes_per_core_its_runs_drivers_ask_for_on_average(
    drivers: tuple[str, ...], per_core: int
) -> None:
    work = [(ONE, Target(PG, None, Route.DIRECT, Driver(d))) for d in drivers]
    assert agent_lanes_per_core(work) == per_core


@pytest.mark.parametrize("driver", ["pgjdbc", "pgjdbc-maven"])
def test_a_matrix_of_pgjdbc_runs_two_lanes_per_core_as_each_lane_starts_three_jvms(driver: str) -> None:
    assert agent_lanes_per_core([(ONE, Target(PG, None, Route.DIRECT, Driver(driver)))]) == 2


def test_a_matrix_runs_agents_when_either_application_of_a_pair_is_one() -> None:
    native = Target(PG, None, Route.DIRECT, Driver.PSYCOPG)
    assert not runs_agents([(ONE, native)])
    assert runs_agents([(ONE, native), (ONE, Target(PG, None, Route.DIRECT, Driver("pgjdbc")))])


def test_when_lanes_cannot_start_every_test_gets_the_failure_instead_of_waiting() -> None:
    from concurrent.futures import Future

    import pytest

    from leakcheck.run.lanes import Lanes

    class Broken:
        def postgres(self, pg: Version) -> None:
            raise AssertionError("not reached")

    lanes = Lanes(Broken(), 1, lambda p, t: p.id)  # type: ignore[arg-type]

    def broken_lane_of(probe: object, target: object) -> object:
        raise RuntimeError("bad input")

    target = Target(PG, B, Route.TRANSACTION, Driver.PSYCOPG)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("leakcheck.run.lanes.lane_of", broken_lane_of)
        with pytest.raises(RuntimeError):
            lanes.start([(ONE, target), (TWO, target)])
    for probe in (ONE, TWO):
        with pytest.raises(RuntimeError, match="bad input"):
            lanes.result(probe, target)
    assert all(isinstance(f, Future) for f in lanes._futures.values())


def test_what_the_run_made_before_its_lanes_start_is_out_of_the_collectors_sight_until_they_close() -> None:
    import gc

    from leakcheck.run.lanes import Lanes

    class Down:
        def warm(self, pgs: object, poolers: object) -> None:
            pass

        def postgres(self, pg: Version) -> None:
            raise RuntimeError("no server here")

    lanes = Lanes(Down(), 1, lambda p, t: p.id)  # type: ignore[arg-type]
    target = Target(PG, None, Route.DIRECT, Driver.PSYCOPG)
    gc.unfreeze()
    try:
        lanes.start([(ONE, target)])
        assert gc.get_freeze_count() > 0
        lanes.result(ONE, target)
    finally:
        lanes.close()
    assert gc.get_freeze_count() == 0


def _native_shape(poolers: int, pgs: int = 3) -> list[tuple[Probe, Target]]:
    """The full native matrix's shape: every probe, both drivers, the transaction and session routes."""
    cells = [Pooler(PoolerKind.PGBOUNCER, Version((1, n, 0))) for n in range(poolers)]
    return [(p, Target(Version((16 + g, 0)), c, route, d)) for g in range(pgs) for c in cells for d in NATIVE_DRIVERS
            for route in (Route.TRANSACTION, Route.SESSION) for p in PROBES]


def test_the_full_native_matrix_fits_one_run() -> None:
    work = _native_shape(poolers=7)
    check_capacity(work)  # no error
    per_pg = {lane_of(p, t) for p, t in work if t.pg == Version((16, 0))}
    assert len(per_pg) <= MAX_POOLERS_PER_PG


def test_a_matrix_of_more_probe_runs_than_one_run_takes_is_one_line_saying_to_split_it() -> None:
    work = [(ONE, Target(Version((16, n)), None, Route.DIRECT, Driver.PSYCOPG)) for n in range(MAX_RUNS + 1)]
    with pytest.raises(UsageError, match=f"{MAX_RUNS + 1} probe runs, more than the {MAX_RUNS}.*split it"):
        check_capacity(work)


def test_more_poolers_on_one_postgresql_than_it_holds_is_one_line_saying_to_split_it() -> None:
    work = _native_shape(poolers=11, pgs=1)  # 11 poolers x 2 drivers x 3 pools: 66 processes
    with pytest.raises(UsageError, match=f"66 pooler processes on PostgreSQL 16.0, more than the {MAX_POOLERS_PER_PG}"):
        check_capacity(work)


def test_lanes_that_start_together_start_at_different_probes_and_each_keeps_every_run_of_its_own() -> None:
    from leakcheck.run.lanes import staggered

    jobs = 8
    lanes = [[(p, Target(Version((16, n)), B, Route.TRANSACTION, Driver.PSYCOPG)) for p in PROBES] for n in range(12)]
    rotated = staggered(lanes, jobs)
    assert len({items[0][0].id for items in rotated[:jobs]}) == jobs  # the waiting probes do not coincide
    assert all(sorted(map(id, new)) == sorted(map(id, old)) for new, old in zip(rotated, lanes, strict=True))
    assert [p.id for p, _ in rotated[0]] == [p.id for p in PROBES]  # the first lane keeps pytest's order


def _gate_groups() -> list[list[str]]:
    """The driver groups scripts/test's driver step runs, one run each (its `for drivers in ...` loop)."""
    import re
    from pathlib import Path

    text = (Path(__file__).parents[2] / "scripts" / "test").read_text()
    loop = re.search(r"^for drivers in (.*?); do$", text, re.MULTILINE)
    assert loop, "scripts/test's driver step runs its drivers in groups (for drivers in ...)"
    return [group.split(",") for group in loop.group(1).split()]


def test_each_run_of_the_driver_gate_fits_what_one_run_holds() -> None:
    # 13 drivers on one PostgreSQL version are 117 poolers, and 11 were 99: over the 64 one run starts.
    for group in _gate_groups():
        cells = [Pooler(PoolerKind.PGBOUNCER, Version((1, n, 0))) for n in (18, 24, 26)]
        pooled = [(p, Target(Version((pg, 0)), c, route, Driver(d))) for pg in (16, 18) for c in cells
                  for route in (Route.TRANSACTION, Route.SESSION) for d in group for p in PROBES]
        controls = [(p, Target(Version((pg, 0)), None, route, Driver(d))) for pg in (16, 18)
                    for route in (Route.DIRECT, Route.SHARED) for d in group for p in PROBES]
        check_capacity(pooled + controls)


def test_a_run_stopped_early_closes_without_waiting_for_lanes_that_never_started() -> None:
    """pytest -x: a lane still queued behind the running ones is cancelled, and close() does not wait for it
    (concurrent.futures.wait never counts a future cancelled by shutdown(cancel_futures=True) as done)."""
    import threading

    from leakcheck.run.lanes import Lanes

    class Up:
        def warm(self, pgs: object, poolers: object) -> None:
            pass

        def postgres(self, pg: Version) -> None:
            pass

    release = threading.Event()

    def held_probe(backend: object, probe: object, target: object, earlier: object) -> object:
        release.wait(5)
        raise RuntimeError("stopped")

    lanes = Lanes(Up(), 1, lambda p, t: p.id)  # type: ignore[arg-type]
    one, two = (Target(PG, None, Route.DIRECT, driver) for driver in (Driver.PSYCOPG, Driver.ASYNCPG))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("leakcheck.run.lanes.run_probe", held_probe)
        lanes.start([(ONE, one), (ONE, two)])  # one lane runs (jobs=1), the other waits for it
        closing = threading.Thread(target=lanes.close, daemon=True)
        closing.start()
        release.set()  # the running lane's probe ends
        closing.join(10)
    assert not closing.is_alive()
