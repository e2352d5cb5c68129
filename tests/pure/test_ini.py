"""The one pgbouncer.ini renderer."""

import pytest

from leakcheck.model.pool_settings import PoolMode, PoolSettings
from leakcheck.provision.pgbouncer.ini import BouncerLayout, render_auth_file, render_ini

LAYOUT = BouncerLayout(
    listen_port=6432, server_host="127.0.0.1", server_port=5432, dbname="leakcheck", user="leakcheck",
    auth_file="/x/users.txt", logfile="/x/pgbouncer.log", pidfile="/x/pgbouncer.pid",
)


def settings_of(text: str) -> dict[str, str]:
    pairs = [line.split(" = ", 1) for line in text.splitlines() if " = " in line]
    return {k: v for k, v in pairs}


def test_transaction_mode_with_a_pool_of_one_is_the_default() -> None:
    ini = settings_of(render_ini(PoolSettings(), LAYOUT))
    assert ini["pool_mode"] == "transaction" and ini["default_pool_size"] == "1"


def test_it_listens_on_loopback_only_and_points_at_the_server() -> None:
    text = render_ini(PoolSettings(PoolMode.SESSION, 2), LAYOUT)
    ini = settings_of(text)
    assert ini["listen_addr"] == "127.0.0.1" and ini["listen_port"] == "6432"
    # No user=: each client's own role logs in to the server, so the app role is no superuser there.
    assert ini["leakcheck"] == "host=127.0.0.1 port=5432 dbname=leakcheck"
    assert ini["pool_mode"] == "session" and ini["default_pool_size"] == "2"


def test_it_sets_nothing_that_would_hide_a_leak() -> None:
    ini = settings_of(render_ini(PoolSettings(), LAYOUT))
    for untouched in ("server_reset_query", "server_reset_query_always", "track_extra_parameters",
                      "max_prepared_statements", "ignore_startup_parameters"):
        assert untouched not in ini


def test_a_pool_of_zero_is_refused() -> None:
    with pytest.raises(ValueError, match="pool_size"):
        render_ini(PoolSettings(pool_size=0), LAYOUT)


def test_the_auth_file_lists_and_quotes_each_user_and_password() -> None:
    assert render_auth_file((('le"ak', 'p"w'), ("app", "x"))) == '"le""ak" "p""w"\n"app" "x"\n'


def test_clients_and_the_admin_console_need_a_password() -> None:
    assert settings_of(render_ini(PoolSettings(), LAYOUT))["auth_type"] == "md5"


def test_a_drivers_ignored_startup_parameter_joins_the_axis_value_of_ignore_startup_parameters() -> None:
    ini = render_ini(PoolSettings(ignored_startup=("extra_float_digits",)), LAYOUT,
                     (("ignore_startup_parameters", "options"),))
    assert [line for line in ini.splitlines() if line.startswith("ignore_startup_parameters")] == [
        "ignore_startup_parameters = options, extra_float_digits"]


def test_no_ignore_startup_parameters_line_is_written_when_no_driver_needs_one() -> None:
    assert "ignore_startup_parameters" not in render_ini(PoolSettings(), LAYOUT)


def test_a_socket_folder_with_a_space_stays_one_value_of_the_connection_string() -> None:
    layout = BouncerLayout(
        listen_port=6432, server_host="/tmp/a b/sock", server_port=5432, dbname="leakcheck", user="leakcheck",
        auth_file="/x/users.txt", logfile="/x/pgbouncer.log", pidfile="/x/pgbouncer.pid",
        peers=((2, "/tmp/a b/it's"),),
    )
    text = render_ini(PoolSettings(), layout)
    # PgBouncer's loader.c: a space ends a plain value; a quoted value doubles its quotes
    assert "leakcheck = host='/tmp/a b/sock' port=5432 dbname=leakcheck\n" in text
    assert "2 = host='/tmp/a b/it''s' port=6432" in text
