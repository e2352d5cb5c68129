"""A PostgreSQL that refuses a setting at start is diagnosed by that setting, in its own words."""

from __future__ import annotations

from leakcheck.provision.postgres.server import refused_setting


def test_an_unknown_setting_is_named_from_the_servers_log() -> None:
    log = '2026-12-01 10:00:00 UTC [7] LOG:  unrecognized configuration parameter "no_such_setting"\n'
    assert refused_setting(log) == 'unrecognized configuration parameter "no_such_setting"'


def test_a_bad_value_is_named_with_what_the_server_said_about_it() -> None:
    log = 'FATAL:  invalid value for parameter "max_connections": "lots"\n'
    assert refused_setting(log) == 'invalid value for parameter "max_connections": "lots"'


def test_a_log_that_names_no_setting_is_not_a_setting_problem() -> None:
    assert refused_setting("FATAL:  could not open file \"global/pg_control\": No such file or directory\n") is None
