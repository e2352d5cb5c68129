"""Hand-overs measured: A leaves, the next client B is handed A's server connection, and the
pooler's reset decides whether B sees what A left (probes/handover.py)."""

from __future__ import annotations

import pytest

from leakcheck.model.target import Driver, Pooler, PoolerKind, Route, Setting, Target
from leakcheck.model.verdicts import Outcome, Verdict
from leakcheck.model.versions import parse_spec
from leakcheck.probes import handover
from leakcheck.probes.base import Probe
from leakcheck.provision.native import NativeBackend
from leakcheck.run.runner import run_probe
from tests.servers.conftest import TEST_PG, Measure

pytestmark = pytest.mark.servers

PROBES = handover.PROBES
PSYCOPG = Driver("psycopg")


def through(native: NativeBackend, measure: Measure, probe: Probe, kind: PoolerKind, spec: str,
            *settings: Setting) -> Outcome:
    version = native.resolve_pooler(kind, parse_spec(spec, "--pooler"))
    target = Target(measure.pg(TEST_PG[0]), Pooler(kind, version, settings), Route.TRANSACTION, PSYCOPG)
    return run_probe(native, probe, target)


def same_server(outcome: Outcome) -> bool:
    """The evidence names one server for A and B: B was handed A's server connection."""
    servers = outcome.evidence.rsplit("[", 1)[-1]
    return servers.count("pid") == 2 and len({part.split(" on ")[-1] for part in servers.strip("]").split("; ")}) == 1


@pytest.mark.parametrize("version", ["4.3", "4.7"])
@pytest.mark.parametrize("probe", PROBES, ids=lambda p: p.id)
def test_pgpool_hands_the_next_client_the_cached_backend_clean_by_default_and_dirty_with_abort_only(
    native: NativeBackend, measure: Measure, probe: Probe, version: str
) -> None:
    default = through(native, measure, probe, PoolerKind.PGPOOL, version)
    abort = through(native, measure, probe, PoolerKind.PGPOOL, version, ("reset_query_list", "ABORT"))
    assert default.verdict is Verdict.ISOLATED and same_server(default), default.evidence
    assert abort.verdict is Verdict.LEAKS and same_server(abort), abort.evidence


def test_pgpool_without_connection_cache_hands_over_nothing_not_applicable_with_both_identities(
    native: NativeBackend, measure: Measure
) -> None:
    outcome = through(native, measure, PROBES[0], PoolerKind.PGPOOL, "4.7", ("connection_cache", "off"))
    assert outcome.verdict is Verdict.NOT_APPLICABLE, outcome.evidence
    assert "did not hand B the server connection A left" in outcome.evidence
    assert outcome.evidence.count("started") == 2


@pytest.mark.parametrize("probe", PROBES, ids=lambda p: p.id)
def test_pgbouncer_in_session_mode_resets_a_handed_over_server_unless_server_reset_query_is_empty(
    native: NativeBackend, measure: Measure, probe: Probe
) -> None:
    session = ("pool_mode", "session")
    reset = through(native, measure, probe, PoolerKind.PGBOUNCER, "1.24", session)
    kept = through(native, measure, probe, PoolerKind.PGBOUNCER, "1.24", session, ("server_reset_query", ""))
    assert reset.verdict is Verdict.ISOLATED and same_server(reset), reset.evidence
    assert kept.verdict is Verdict.LEAKS and same_server(kept), kept.evidence


@pytest.mark.parametrize("probe", PROBES, ids=lambda p: p.id)
def test_a_hand_over_probe_is_isolated_on_a_new_backend_and_leaks_on_the_same_session(
    measure: Measure, probe: Probe
) -> None:
    apart = measure(probe, TEST_PG[0], None, PSYCOPG, Route.DIRECT)
    together = measure(probe, TEST_PG[0], None, PSYCOPG, Route.SHARED)
    assert apart.verdict is Verdict.ISOLATED, apart.evidence
    assert together.verdict is Verdict.LEAKS, together.evidence
