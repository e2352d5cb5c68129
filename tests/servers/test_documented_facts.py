"""Facts documented elsewhere, checked against real servers. Expectations live here, never in probes."""

from __future__ import annotations

import pytest

from leakcheck.model.target import Driver
from leakcheck.model.verdicts import Fact, Verdict
from tests.support.servers import DRIVERS, TEST_BOUNCER, TEST_PG, Measure

pytestmark = pytest.mark.servers

#: The axes these facts are checked on: every driver; every PgBouncer, those from 1.24, or 1.18 alone.
every_driver = pytest.mark.parametrize("driver", DRIVERS, ids=str)
every_bouncer = pytest.mark.parametrize("bouncer", TEST_BOUNCER)
bouncers_from_1_24 = pytest.mark.parametrize("bouncer", [b for b in TEST_BOUNCER if b != "1.18"])
needs_1_18 = pytest.mark.skipif("1.18" not in TEST_BOUNCER, reason="PgBouncer 1.18 not in LEAKCHECK_TEST_BOUNCER")


@every_driver
@every_bouncer
def test_statement_timeout_leaks_in_transaction_mode_with_a_pool_of_one(
    measure: Measure, bouncer: str, driver: Driver
) -> None:
    outcome = measure("statement_timeout", TEST_PG[0], bouncer, driver)
    assert outcome.verdict is Verdict.LEAKS, outcome.evidence
    assert "57014" in outcome.evidence  # B's query really was cancelled
    assert "B read '500ms'" in outcome.evidence  # and B's session has A's setting


@every_driver
@every_bouncer
def test_timezone_is_isolated_because_pgbouncer_tracks_it(measure: Measure, bouncer: str, driver: Driver) -> None:
    outcome = measure("timezone", TEST_PG[0], bouncer, driver)
    assert outcome.verdict is Verdict.ISOLATED, outcome.evidence


@needs_1_18
def test_psycopg_protocol_prepares_collide_on_pgbouncer_1_18(measure: Measure) -> None:
    outcome = measure("protocol_prepare", TEST_PG[0], "1.18", Driver.PSYCOPG)
    assert outcome.verdict is Verdict.BREAKS, outcome.evidence
    assert "42P05" in outcome.evidence and "_pg3_0" in outcome.evidence


@needs_1_18
@every_driver
def test_a_protocol_prepared_statement_is_lost_on_another_server_with_pgbouncer_1_18(
    measure: Measure, driver: Driver
) -> None:
    outcome = measure("protocol_prepare_moved", TEST_PG[0], "1.18", driver)
    assert Fact.LOST in outcome.facts, outcome.evidence
    assert "26000" in outcome.evidence


@every_driver
@bouncers_from_1_24
def test_protocol_prepares_follow_the_client_to_another_server_from_pgbouncer_1_24(
    measure: Measure, bouncer: str, driver: Driver
) -> None:
    # max_prepared_statements defaults to 200 since 1.24: PgBouncer re-prepares as PGBOUNCER_N.
    outcome = measure("protocol_prepare_moved", TEST_PG[0], bouncer, driver)
    assert outcome.verdict is Verdict.ISOLATED, outcome.evidence


@pytest.mark.skipif(not {"16", "18"} <= set(TEST_PG) or "1.26" not in TEST_BOUNCER,
                    reason="needs PostgreSQL 16 and 18 and PgBouncer 1.26")
@every_driver
def test_search_path_leaks_on_postgresql_16_but_not_18_with_pgbouncer_1_26(measure: Measure, driver: Driver) -> None:
    # PostgreSQL 18 reports search_path, so PgBouncer can track and re-apply it.
    assert measure("search_path", "16", "1.26", driver).verdict is Verdict.LEAKS
    assert measure("search_path", "18", "1.26", driver).verdict is Verdict.ISOLATED


@every_driver
@every_bouncer
def test_a_tracked_parameter_follows_the_client_to_another_server_and_a_custom_one_does_not(
    measure: Measure, bouncer: str, driver: Driver
) -> None:
    # PgBouncer re-applies tracked parameters (TimeZone) when it links a client to a server.
    assert measure("timezone_moved", TEST_PG[0], bouncer, driver).verdict is Verdict.ISOLATED
    moved = measure("custom_setting_moved", TEST_PG[0], bouncer, driver)
    assert Fact.LOST in moved.facts, moved.evidence
    assert Fact.LEAKED in moved.facts  # and B, on A's old server, sees A's value


@needs_1_18
def test_two_asyncpg_applications_collide_on_their_first_statement_name_on_pgbouncer_1_18(measure: Measure) -> None:
    # Each application numbers its statements from 1; a shared server already has A's __asyncpg_stmt_1__.
    outcome = measure("protocol_prepare", TEST_PG[0], "1.18", Driver.ASYNCPG)
    assert outcome.verdict is Verdict.BREAKS, outcome.evidence
    assert '42P05: prepared statement "__asyncpg_stmt_1__" already exists' in outcome.evidence


@every_driver
@bouncers_from_1_24
def test_pgbouncer_statements_are_readable_and_runnable_by_another_client_from_1_24(
    measure: Measure, bouncer: str, driver: Driver
) -> None:
    # protocol_prepare is isolated here (no driver-named statement), yet the SQL text is not private.
    outcome = measure("prepared_disclosure", TEST_PG[0], bouncer, driver)
    assert outcome.verdict is Verdict.LEAKS, outcome.evidence
    assert "PGBOUNCER_" in outcome.evidence and "-> 'lc_secret_" in outcome.evidence


@every_driver
def test_a_notification_for_a_listener_goes_to_whoever_holds_the_server(measure: Measure, driver: Driver) -> None:
    outcome = measure("listen_notify", TEST_PG[0], TEST_BOUNCER[-1], driver)
    assert outcome.verdict is Verdict.LEAKS and Fact.LOST in outcome.facts, outcome.evidence


@every_driver
@every_bouncer
def test_a_drivers_cancel_stops_its_own_statement_through_pgbouncer(
    measure: Measure, bouncer: str, driver: Driver
) -> None:
    outcome = measure("cancel_own", TEST_PG[0], bouncer, driver)
    assert outcome.verdict is Verdict.ISOLATED, outcome.evidence
    assert "57014" in outcome.evidence  # the statement itself was cancelled


@every_driver
@every_bouncer
def test_a_cancel_sent_after_the_statement_ended_does_not_stop_the_next_clients_statement(
    measure: Measure, bouncer: str, driver: Driver
) -> None:
    # PgBouncer keys cancels per client (#717, fixed in 1.18): A's key names A, not the server.
    outcome = measure("cancel_late", TEST_PG[0], bouncer, driver)
    assert outcome.verdict is Verdict.ISOLATED, outcome.evidence
    assert "completed normally" in outcome.evidence
