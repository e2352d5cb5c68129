"""The probes from bugs users hit in 2025-2026 (issue 24), held to what they measured on real servers.
Expectations live here, never in the probes."""

from __future__ import annotations

import pytest

from leakcheck.model.target import Driver, Route
from leakcheck.model.verdicts import Fact, Verdict
from tests.support.servers import TEST_BOUNCER, TEST_PG, Measure

pytestmark = pytest.mark.servers

needs_18 = pytest.mark.skipif("18" not in TEST_PG, reason="PostgreSQL 18 not in LEAKCHECK_TEST_PG")


def needs(*bouncers: str) -> pytest.MarkDecorator:
    missing = [b for b in bouncers if b not in TEST_BOUNCER]
    return pytest.mark.skipif(bool(missing), reason=f"PgBouncer {', '.join(missing)} not in LEAKCHECK_TEST_BOUNCER")


@needs_18
@needs("1.26")
@pytest.mark.parametrize("driver", [Driver.PSYCOPG, Driver("ruby-pg")], ids=str)
def test_an_empty_search_path_disconnects_the_client_that_set_it_and_moves_the_other_on_pgbouncer_1_26(
        measure: Measure, driver: Driver) -> None:
    # PgBouncer 1.26 tracks search_path on PostgreSQL 18 and cannot put an empty one back ("invalid server
    # parameter"); through an agent, whose error does not say its connection closed, too.
    outcome = measure("search_path_emptied", "18", "1.26", driver)
    assert outcome.verdict is Verdict.BREAKS, outcome.evidence
    assert {Fact.DISCONNECTED, Fact.MOVED} <= set(outcome.facts), outcome.evidence
    assert "invalid server parameter" in outcome.evidence


@needs("1.24")
def test_the_empty_search_path_of_pg_dump_reaches_the_next_client_without_tracking(measure: Measure) -> None:
    outcome = measure("search_path_emptied", TEST_PG[0], "1.24", Driver.PSYCOPG)
    assert outcome.verdict is Verdict.LEAKS, outcome.evidence
    assert "42P01" in outcome.evidence  # B's unqualified table is not found


@needs("1.24", "1.26")
def test_a_copy_whose_data_fails_early_keeps_the_pool_s_server_connection_on_1_24_and_not_on_1_26(
        measure: Measure) -> None:
    stuck = measure("copy_error_autocommit", TEST_PG[0], "1.24", Driver.PSYCOPG)
    assert stuck.verdict is Verdict.BREAKS and Fact.STALLED in stuck.facts, stuck.evidence
    fixed = measure("copy_error_autocommit", TEST_PG[0], "1.26", Driver.PSYCOPG)
    assert fixed.verdict is Verdict.ISOLATED, fixed.evidence
    assert "22P04" in fixed.evidence  # the COPY failed on its malformed row, as designed
    # the rest of A's data went once the witness saw the server fail the COPY, not after a pause by time
    assert "after the server was seen to fail it" in fixed.evidence, fixed.evidence


@needs("1.26")
@pytest.mark.parametrize("driver", [Driver(d) for d in ("ruby-pg", "pgx-v5", "pgjdbc", "postgres-js")], ids=str)
def test_an_agent_s_copy_sends_the_rest_of_its_data_on_the_go_the_harness_sends_once_the_server_failed_it(
        measure: Measure, driver: Driver) -> None:
    # each language's agent reads the `go` beside its running copy_in (a thread, a goroutine, Node's event loop)
    # and its answer says its pause ended on it: not the 1 s bound it pauses without one
    outcome = measure("copy_error_autocommit", TEST_PG[0], "1.26", driver)
    assert outcome.verdict is Verdict.ISOLATED, outcome.evidence
    assert "22P04" in outcome.evidence, outcome.evidence
    assert "after the server was seen to fail it" in outcome.evidence, outcome.evidence


@needs("1.24", "1.26")
def test_parse_and_close_in_one_pipeline_get_their_answers_out_of_order_on_1_24_and_in_order_on_1_26(
        measure: Measure) -> None:
    wrong = measure("parse_close_batch", TEST_PG[0], "1.24", Driver.PSYCOPG)
    assert wrong.verdict is Verdict.BREAKS, wrong.evidence
    assert "command 2: TUPLES_OK" in wrong.evidence  # the Close got the Execute's rows
    right = measure("parse_close_batch", TEST_PG[0], "1.26", Driver.PSYCOPG)
    assert right.verdict is Verdict.ISOLATED, right.evidence


@needs("1.26")
@pytest.mark.parametrize("route", [Route.TRANSACTION, Route.SESSION], ids=str)
def test_pgbouncer_1_26_announces_the_pool_mode_it_runs_and_its_statement_limit(measure: Measure, route: Route) -> None:
    outcome = measure("pooler_announced", TEST_PG[0], "1.26", Driver.PSYCOPG, route)
    assert outcome.verdict is Verdict.ISOLATED and Fact.MISREPORTED not in outcome.facts, outcome.evidence
    mode = "transaction" if route is Route.TRANSACTION else "session"
    assert f"pgbouncer.pool_mode='{mode}'" in outcome.evidence
    assert "pgbouncer.max_prepared_statements='200'" in outcome.evidence


@needs_18
@needs("1.18", "1.24")
def test_protocol_3_2_is_refused_by_pgbouncer_1_18_negotiated_down_by_1_24_and_spoken_by_postgresql_18(
        measure: Measure) -> None:
    refused = measure("cancel_own_protocol_32", "18", "1.18", Driver.PSYCOPG)
    assert refused.verdict is Verdict.NOT_APPLICABLE and "bad packet header" in refused.evidence, refused.evidence
    down = measure("cancel_own_protocol_32", "18", "1.24", Driver.PSYCOPG)
    assert down.verdict is Verdict.ISOLATED and "speaks '3.0'" in down.evidence, down.evidence
    direct = measure("cancel_own_protocol_32", "18", None, Driver.PSYCOPG, Route.DIRECT)
    assert direct.verdict is Verdict.ISOLATED and "speaks '3.2'" in direct.evidence, direct.evidence


@needs_18
@needs("1.26")
def test_a_cached_plan_fails_after_another_client_s_temp_table_but_not_after_its_search_path_on_1_26(
        measure: Measure) -> None:
    temp = measure("cached_plan_temp_table", "18", "1.26", Driver.PSYCOPG)
    assert temp.verdict is Verdict.LEAKS and "0A000" in temp.evidence, temp.evidence
    path = measure("cached_plan_search_path", "18", "1.26", Driver.PSYCOPG)  # 1.26 puts A's search_path back
    assert path.verdict is Verdict.ISOLATED, path.evidence


@needs("1.24")
def test_a_rolled_back_set_of_a_tracked_parameter_stays_rolled_back(measure: Measure) -> None:
    for probe in ("set_rollback", "set_rollback_savepoint"):
        outcome = measure(probe, TEST_PG[0], "1.24", Driver.PSYCOPG)
        assert outcome.verdict is Verdict.ISOLATED, outcome.evidence
