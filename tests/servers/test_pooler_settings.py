"""Settings as matrix axes and the team's own pgbouncer.ini, end to end on real servers."""

from __future__ import annotations

import json

import pytest

from tests.server_user_access import let_the_server_user_enter

pytestmark = pytest.mark.servers

ONE = ["--pg=16", "--drivers=psycopg", "--controls=no"]


@pytest.fixture
def pytester(pytester: pytest.Pytester) -> pytest.Pytester:
    """pytester's folder, enterable by the server user: PgBouncer must be able to read the team's ini."""
    let_the_server_user_enter(pytester.path)
    return pytester


def verdicts(pytester: pytest.Pytester) -> dict[tuple[str, str], str]:
    data = json.loads((pytester.path / "r.json").read_text())
    return {(o["pooler"]["label"], o["probe"]): o["verdict"] for o in data["outcomes"] if o["route"] == "transaction"}


def test_settings_axes_are_crossed_and_named_in_ids_and_results(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess(*ONE, "--bouncer=1.24", "--probes=protocol_prepare",
                                          "--bouncer-set=max_prepared_statements=0,200",
                                          "--bouncer-set=server_reset_query_always=0,1", "--results=r.json", "-v")
    result.stdout.fnmatch_lines_random([
        "*test_leak?pg16.*-pgbouncer1.24.*[[]max_prepared_statements=0,server_reset_query_always=0[]]-psycopg*",
        "*test_leak?pg16.*-pgbouncer1.24.*[[]max_prepared_statements=200,server_reset_query_always=1[]]-psycopg*",
    ])
    measured = verdicts(pytester)
    assert len(measured) == 4  # 2 x 2 cells
    # Measured here, never assumed: what the closing note reports, the test only checks it was measured.
    # with server_reset_query_always a driver's statement cannot be seen between its autocommit runs: where every
    # run worked that is said (not applicable), never guessed
    assert set(measured.values()) <= {"isolated", "leaks", "lost", "breaks", "not_applicable"}


def test_statement_mode_says_not_applicable_where_a_probe_needs_a_transaction_block(
    pytester: pytest.Pytester,
) -> None:
    result = pytester.runpytest_inprocess(*ONE, "--bouncer=1.24", "--probes=set_local,custom_setting,protocol_prepare",
                                          "--bouncer-set=pool_mode=statement", "--results=r.json", "-rs")
    result.stdout.fnmatch_lines(["*not applicable: the pooler refused a step this probe needs: *transaction blocks "
                                 "not allowed in statement pooling mode*"])
    measured = verdicts(pytester)
    assert measured[("pgbouncer1.24.1[pool_mode=statement]", "set_local")] == "not_applicable"
    # A and B act as applications (autocommit): a session setting needs no transaction block, so it is measured
    assert measured[("pgbouncer1.24.1[pool_mode=statement]", "custom_setting")] not in ("error", "not_applicable")
    assert measured[("pgbouncer1.24.1[pool_mode=statement]", "protocol_prepare")] != "error"


def test_a_setting_the_version_does_not_know_is_pgbouncers_own_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess(*ONE, "--bouncer=1.18", "--probes=timezone",
                                          "--bouncer-set=max_prepared_statements=200")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*PgBouncer 1.18.0 * did not start: it exited with code 1. It said: unknown "
                                 "parameter: pgbouncer/max_prepared_statements.*"])


@pytest.mark.parametrize(("axis", "message"), [
    ("listen_port=1", "leakcheck sets listen_port itself"),
    ("pool_mode=sometimes", "pool_mode is one of session, statement, transaction"),
    ("max_prepared_statements", "NAME=V1,V2"),
])
def test_an_axis_leakcheck_cannot_run_is_one_line_before_anything_starts(pytester: pytest.Pytester, axis: str,
                                                                        message: str) -> None:
    result = pytester.runpytest_inprocess(*ONE, "--bouncer=1.24", f"--bouncer-set={axis}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.startswith("ERROR:")]
    assert len(errors) == 1 and message in errors[0]


def test_the_teams_ini_runs_with_only_the_harness_keys_overridden_and_they_are_listed(
    pytester: pytest.Pytester,
) -> None:
    (pytester.path / "prod.ini").write_text(
        "[databases]\napp = host=db1.internal dbname=app\n[pgbouncer]\nlisten_addr = *\nauth_type = hba\n"
        "auth_hba_file = /etc/pgbouncer/hba.conf\ndefault_pool_size = 40\nserver_reset_query_always = 1\n"
        "max_prepared_statements = 0\n[users]\nreporting = pool_mode=session\n")
    result = pytester.runpytest_inprocess(*ONE, "--bouncer=1.24", "--probes=custom_setting",
                                          "--bouncer-ini=prod.ini", "--results=r.json", "-v")
    result.stdout.fnmatch_lines_random([
        "*test_leak?pg16.*-pgbouncer1.24.*[[]ini=prod[]]-psycopg*-custom_setting? *",
        "--bouncer-ini prod.ini: kept as written except:",
        "  listen_addr: '*' overridden (leakcheck listens on 127.0.0.1 only)",
        "  auth_hba_file: '/etc/pgbouncer/hba.conf' dropped (auth is the run's passwords)",
        "  [[]databases]: its 1 entries replaced *",
    ])
    header = result.stdout.str()
    assert "so_reuseport" not in header and "peer_id" not in header  # one PgBouncer: no fleet keys are set
    assert verdicts(pytester)[("pgbouncer1.24.1[ini=prod]", "custom_setting")] in {"lost", "leaks", "isolated"}


def test_an_ini_pgbouncer_rejects_gives_pgbouncers_message(pytester: pytest.Pytester) -> None:
    # Parsed as PgBouncer parses it and a key a team may set (so not refused up front), but a value it refuses.
    (pytester.path / "bad.ini").write_text("[pgbouncer]\nmax_client_conn = lots\n")
    result = pytester.runpytest_inprocess(*ONE, "--bouncer=1.24", "--probes=timezone", "--bouncer-ini=bad.ini")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(['*PgBouncer 1.24.* did not start: *It said: *invalid value "lots" for parameter '
                                 "max_client_conn*"])


def test_an_ini_key_a_team_may_not_set_is_one_line_before_anything_starts(pytester: pytest.Pytester) -> None:
    # (its own name: team_ini.load keeps what it read by the path as given, for the process)
    (pytester.path / "perms.ini").write_text("[pgbouncer]\nmax_client_conn = 9\nunix_socket_perms = 0777\n")
    result = pytester.runpytest_inprocess(*ONE, "--bouncer=1.24", "--probes=timezone", "--bouncer-ini=perms.ini")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.startswith("ERROR:")]
    assert len(errors) == 1 and "unix_socket_perms at perms.ini:3" in errors[0] and "PgBouncer" in errors[0]
