"""PgBouncer fleets without a server: the option, the cells, their labels, the ini, the cancel packet."""

from __future__ import annotations

import asyncio

import pytest

from leakcheck.config.config import Config
from leakcheck.model.axes import parse_fleet
from leakcheck.model.errors import ProbeError, StartError, UsageError
from leakcheck.model.pool_settings import PoolSettings
from leakcheck.model.target import Driver, Pooler, PoolerKind, Route, Target
from leakcheck.model.verdicts import Observation, Proof, ServerId
from leakcheck.model.versions import Version
from leakcheck.probes import PROBES
from leakcheck.probes.base import Attempt
from leakcheck.provision.base import Binary, Endpoint
from leakcheck.provision.host.system import ServerUser
from leakcheck.provision.pgbouncer.fleet import BouncerFleet
from leakcheck.provision.pgbouncer.ini import BouncerLayout, harness_values, render_ini
from leakcheck.results.results import pooler_json
from leakcheck.run.matrix import pooler_cells
from leakcheck.run.runner import never_shared, plan_of

V124, V126, V118 = Version.parse("1.24.1"), Version.parse("1.26.1"), Version.parse("1.18.0")


def config(**raw: str) -> Config:
    return Config.from_strings({"leakcheck_pg": "16", **{f"leakcheck_{k}": v for k, v in raw.items()}})


def cells(cfg: Config) -> list[Pooler]:
    return pooler_cells(cfg.pooler_tables, lambda kind, spec: Version.parse(f"{spec.raw}.1"), cfg.fleet)


def test_a_fleet_of_one_release_is_labelled_with_its_size_and_peering() -> None:
    fleet = Pooler(PoolerKind.PGBOUNCER, V126, (("peering", "yes"),), fleet=(V126, V126))
    assert fleet.label() == "pgbouncer1.26.1x2[peering=yes]"
    assert fleet.label(version_parts=2) == "pgbouncer1.26x2[peering=yes]"


def test_a_rolling_upgrade_fleet_is_labelled_with_each_release_in_process_order() -> None:
    assert Pooler(PoolerKind.PGBOUNCER, V124, fleet=(V124, V126)).label() == "pgbouncer1.24.1+1.26.1"


@pytest.mark.parametrize("raw", ["1", "0", "5", "1.24", "x", "1.24,/usr/sbin/pgbouncer", ""])
def test_a_fleet_option_that_is_no_size_nor_two_releases_is_one_line(raw: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_fleet(raw)
    assert "--bouncer-fleet" in str(caught.value) and "\n" not in str(caught.value)


def test_a_fleet_size_makes_every_pgbouncer_cell_that_many_processes() -> None:
    made = cells(config(bouncer="1.24,1.26", bouncer_fleet="2", bouncer_set="peering=yes,no"))
    assert [c.label() for c in made] == ["pgbouncer1.24.1x2[peering=yes]", "pgbouncer1.24.1x2[peering=no]",
                                         "pgbouncer1.26.1x2[peering=yes]", "pgbouncer1.26.1x2[peering=no]"]


def test_a_rolling_upgrade_fleet_is_a_cell_in_each_direction() -> None:
    made = cells(config(bouncer_fleet="1.24,1.26"))
    assert [c.fleet for c in made] == [(V124, V126), (V126, V124)]


def test_a_rolling_upgrade_fleet_refuses_a_bouncer_list_of_other_releases() -> None:
    with pytest.raises(UsageError, match="--bouncer-fleet=1.24,1.26"):
        config(bouncer="1.18", bouncer_fleet="1.24,1.26")


def test_peering_without_a_fleet_is_an_error_saying_to_add_one() -> None:
    with pytest.raises(UsageError, match="--bouncer-fleet=2"):
        config(bouncer="1.24", bouncer_set="peering=yes")


def test_peering_takes_only_yes_and_no() -> None:
    with pytest.raises(UsageError, match="yes, no"):
        config(bouncer="1.24", bouncer_fleet="2", bouncer_set="peering=on")


def test_peering_on_pgbouncer_1_18_is_one_line_before_any_server_starts() -> None:
    cfg = config(bouncer="1.18", bouncer_fleet="2", bouncer_set="peering=yes")
    with pytest.raises(UsageError) as caught:
        cells(cfg)
    assert "1.18" in str(caught.value) and "peer_id" in str(caught.value) and "\n" not in str(caught.value)


def test_a_fleet_is_taken_on_the_containers_backend_too() -> None:
    assert config(bouncer="1.24", bouncer_fleet="2", backend="containers").fleet.size == 2


def test_the_fleet_probe_is_in_the_default_selection_only_with_a_fleet() -> None:
    assert "cancel_routed" not in {p.id for p in config(bouncer="1.24").probes}
    assert "cancel_routed" in {p.id for p in config(bouncer="1.24", bouncer_fleet="2").probes}


def test_a_fleet_member_ini_shares_the_port_and_names_its_peers_by_socket() -> None:
    layout = BouncerLayout(6432, "127.0.0.1", 5432, "leakcheck", "leakcheck", "/r/users.txt", "/r/log", "/r/pid",
                           unix_socket_dir="/r/one", so_reuseport=True, peer_id=1, peers=((2, "/r/two"),))
    ini = render_ini(PoolSettings(), layout)
    assert "so_reuseport = 1" in ini and "peer_id = 1" in ini
    assert ini.rstrip().endswith("[peers]\n2 = host=/r/two port=6432")
    assert harness_values(PoolSettings(), layout)["unix_socket_dir"] == "/r/one"


def test_a_single_pgbouncer_ini_has_no_fleet_keys() -> None:
    layout = BouncerLayout(6432, "127.0.0.1", 5432, "leakcheck", "leakcheck", "/r/users.txt", "/r/log", "/r/pid")
    ini = render_ini(PoolSettings(), layout)
    assert "so_reuseport" not in ini and "peer_id" not in ini and "[peers]" not in ini


def test_a_results_file_keeps_a_fleet() -> None:
    fleet = Pooler(PoolerKind.PGBOUNCER, V124, fleet=(V124, V126))
    assert pooler_json(fleet)["fleet"] == ["1.24.1", "1.26.1"]  # type: ignore[index]


def test_a_and_b_on_two_processes_of_a_fleet_that_never_share_are_not_applicable_saying_why() -> None:
    probe = next(p for p in PROBES if p.id == "statement_timeout")
    target = Target(Version.parse("16.14"), Pooler(PoolerKind.PGBOUNCER, V124, fleet=(V124, V124)),
                    Route.TRANSACTION, Driver("psycopg"))
    proofs = (Proof("sets", "A", ServerId(1, "1")), Proof("reads", "B", ServerId(2, "2")))
    said = never_shared(plan_of(probe, target), proofs)
    assert said is not None and "own pool" in said and "A on pid 1; B on pid 2" in said
    single = Target(target.pg, Pooler(PoolerKind.PGBOUNCER, V124), Route.TRANSACTION, Driver("psycopg"))
    assert never_shared(plan_of(probe, single), proofs) is None  # one process with a pool of one: a harness error


def _fleet() -> BouncerFleet:
    binaries = tuple(Binary(v, (f"/opt/pgbouncer-{v}/bin/pgbouncer",), "cache") for v in (V124, V126))
    return BouncerFleet(binaries, PoolSettings(), Endpoint("127.0.0.1", 1), ServerUser("postgres", 1, 1))


def test_a_fleet_error_names_its_process_and_program_once() -> None:
    fleet = _fleet()  # nothing started: each process "is not running", its console answers nothing
    lost = fleet.lost()
    assert lost is not None and lost.startswith("process 1 of the fleet")
    assert lost.count("PgBouncer") == 1 and lost.count("/opt/pgbouncer-1.24.1/bin/pgbouncer") == 1, lost
    with pytest.raises(StartError) as raised:
        fleet.reset()
    said = str(raised.value)
    assert said.startswith("process 1 of the fleet") and "admin console did not answer" in said
    assert said.count("PgBouncer") == 1 and said.count("/opt/pgbouncer-1.24.1/bin/pgbouncer") == 1, said


class _Fleet:
    """cancel_routed's scenario as the pure tier gives it: A's pg_sleep ends (normally) after `sleeps` seconds,
    and the cancel is delivered (its peer closed the connection) after `delivery` seconds; it stops nothing."""

    route = Route.TRANSACTION
    a = b = None

    def __init__(self, sleeps: float, delivery: float) -> None:
        self.sleeps, self.delivery = sleeps, delivery
        self.addresses = (Endpoint("127.0.0.1", 1), Endpoint("127.0.0.1", 2))

    def name(self, stem: str) -> str:
        return f"lc_{stem}"

    async def c(self) -> _Fleet:
        return self

    async def query(self, sql: str) -> list[tuple[int]]:  # C sees A's statement sleeping
        return [(1,)]

    async def run(self, client: object, step: str, sql: str) -> Attempt:
        await asyncio.sleep(self.sleeps)
        return Attempt(value="")

    async def observe(self, *args: object) -> None:
        return None


def _cancel_routed(monkeypatch: pytest.MonkeyPatch, sleeps: float, delivery: float) -> Observation:
    from leakcheck.probes import fleet

    async def key(client: object) -> tuple[int, int]:
        return 1, 2

    async def deliver(*args: object) -> None:
        await asyncio.sleep(delivery)

    monkeypatch.setattr(fleet, "cancel_key", key)
    monkeypatch.setattr(fleet, "send_cancel_request", deliver)
    return asyncio.run(fleet.cancel_routed.body(_Fleet(sleeps, delivery)))  # type: ignore[arg-type]


def test_a_routed_cancel_delivered_only_after_the_statement_ended_is_an_error_never_lost(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the rest of the 4 s pg_sleep went by before the fleet's process even closed the cancel connection
    with pytest.raises(ProbeError, match="delivered to 127.0.0.1:2 only after A's pg_sleep"):
        _cancel_routed(monkeypatch, sleeps=0.05, delivery=0.3)


def test_a_routed_cancel_delivered_while_the_statement_slept_that_ran_to_its_end_is_lost(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _cancel_routed(monkeypatch, sleeps=0.3, delivery=0.0)
    assert seen.lost and "was lost: A's pg_sleep(4) ran to its end" in seen.evidence
