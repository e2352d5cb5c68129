"""Mixed applications on one pool (--pairs), end to end on real servers: B runs its own driver, the
controls of a pair pass, and discovery drives a pair."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from leakcheck.discover.differential import Differential
from leakcheck.discover.ops import Kind, Op, Who
from leakcheck.drivers.agents import client as agents
from leakcheck.model.target import Application, Driver, Route
from leakcheck.provision.native import NativeBackend
from tests.support.discover_lab import discover_lab

pytestmark = pytest.mark.servers

A, B = Who.A, Who.B


@pytest.fixture(autouse=True)
def _stop_agents() -> Iterator[None]:
    yield
    agents.stop_all()


def _outcomes(pytester: pytest.Pytester) -> list[dict[str, object]]:
    data = json.loads((pytester.path / "r.json").read_text())
    assert data["version"] == 4  # a pair is among them
    return list(data["outcomes"])


def test_a_pair_of_psycopg_and_asyncpg_gives_b_its_own_driver_and_passes_its_controls(
        pytester: pytest.Pytester) -> None:
    # Through PgBouncer 1.18 two psycopg applications collide on _pg3_0; psycopg beside asyncpg does not
    # (asyncpg names its statement __asyncpg_stmt_1__), yet B still sees A's statement: the pair leaks
    # where the single driver breaks. The hand-over's next B is asyncpg too.
    result = pytester.runpytest_inprocess(
        "--pg=16", "--bouncer=1.18", "--drivers=psycopg", "--pairs=psycopg+asyncpg", "--results=r.json", "-v",
        "--probes=protocol_prepare,custom_setting,handover_prepare,tx_prepare_close")
    result.stdout.fnmatch_lines_random([
        "*test_leak?pg16.*-pgbouncer1.18.*-psycopg3.*+asyncpg0.*-protocol_prepare*",
        "*test_control?pg16.*-shared-psycopg3.*+asyncpg0.*-custom_setting* PASSED*",
        "*test_control?pg16.*-direct-psycopg3.*+asyncpg0.*-protocol_prepare* PASSED*",
        "*test_control?pg16.*-pgbouncer1.18.*-session-psycopg3.*+asyncpg0.*-handover_prepare* PASSED*",
    ])
    outcomes = _outcomes(pytester)
    controls = [o for o in outcomes if o["route"] != "transaction"]
    assert len(controls) == 2 * 3 * 4 and not [o for o in controls if o["verdict"] == "error"]
    pooled = {(o["probe"], (o.get("driver_b") or {}).get("driver")): o for o in outcomes if o["route"] == "transaction"}
    assert pooled[("protocol_prepare", None)]["verdict"] == "breaks"
    paired = pooled[("protocol_prepare", "asyncpg")]
    assert paired["verdict"] == "leaks" and "_pg3_" in str(paired["evidence"]), paired
    assert pooled[("handover_prepare", "asyncpg")]["verdict"] == "leaks"
    assert pooled[("tx_prepare_close", "asyncpg")]["verdict"] not in ("error", "skipped")


def test_a_pair_with_an_agent_as_b_connects_through_a_pooler_told_to_ignore_bs_startup_parameters(
        pytester: pytest.Pytester) -> None:
    # pgjdbc sends extra_float_digits at login, which PgBouncer refuses unless told to ignore it: B's driver's
    # parameters are the pair's pooler's too. Through PgBouncer 1.18 B's two prepared runs are pgjdbc's, which
    # prepares on the server from its fifth (prepareThreshold): no collision with A's _pg3_0, as psycopg's B has
    result = pytester.runpytest_inprocess(
        "--pg=16", "--bouncer=1.18", "--pairs=psycopg+pgjdbc", "--results=r.json", "-v",
        "--probes=protocol_prepare,tx_unit_of_work,custom_setting")
    result.stdout.fnmatch_lines_random(["*test_leak?pg16.*-pgbouncer1.18.*-psycopg3.*+pgjdbc42.*-tx_unit_of_work*"])
    outcomes = _outcomes(pytester)
    assert len(outcomes) == 4 * 3 and all(o["driver_b"]["driver"] == "pgjdbc" for o in outcomes)
    assert not [o for o in outcomes if o["verdict"] == "error"], [o["evidence"] for o in outcomes]
    controls = [line for line in result.outlines if "::test_control[" in line]
    assert len(controls) == 3 * 3 and all("PASSED" in line for line in controls), controls  # each as it must
    verdicts = {(o["route"], o["probe"]): o["verdict"] for o in outcomes}
    assert verdicts[("transaction", "custom_setting")] == "leaks"
    assert verdicts[("transaction", "protocol_prepare")] == "leaks"  # two psycopg applications: breaks


def test_discovery_drives_a_pair_with_b_on_its_own_driver(native: NativeBackend) -> None:
    lab = discover_lab(native, Route.TRANSACTION, "1.18")
    ops = (Op(A, Kind.PROTOCOL, "p1"), Op(B, Kind.PROTOCOL, "p2"))
    with Differential(lab, Driver.PSYCOPG) as measure:
        alone = {(d.who, d.key): d.subject for d in measure(ops).diffs}
    with Differential(lab, Driver.PSYCOPG, b=Application(Driver.ASYNCPG)) as measure:
        paired = {(d.who, d.key): d.subject for d in measure(ops).diffs}
    assert alone[(B, "result:protocol")].startswith('error 42P05: prepared statement "_pg3_0" already exists')
    assert (B, "result:protocol") not in paired  # asyncpg names its own statement: no collision
