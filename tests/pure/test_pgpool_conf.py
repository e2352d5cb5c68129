"""pgpool.conf and its files: one backend in raw mode, password auth, pool size = child processes."""

from __future__ import annotations

import hashlib

import pytest

from leakcheck.model.errors import UsageError
from leakcheck.model.pool_settings import PoolMode, PoolSettings
from leakcheck.model.versions import Version
from leakcheck.provision.pgpool.conf import (
    PgpoolLayout,
    render_pcp_conf,
    render_pgpool_conf,
    render_pool_hba,
    render_pool_passwd,
    start_error,
    value_of,
)

SESSION = PoolSettings(PoolMode.SESSION, 1)


def layout(version: str = "4.3.5") -> PgpoolLayout:
    return PgpoolLayout(version=Version.parse(version), port=9999, run_dir="/run/x", pool_passwd="/run/x/pool_passwd",
                        server_host="127.0.0.1", server_port=5432)


def settings_of(text: str) -> dict[str, str]:
    pairs = [line.split(" = ", 1) for line in text.splitlines() if " = " in line]
    assert len(pairs) == len({k for k, _ in pairs}), "a setting is written twice"
    return dict(pairs)


def test_one_backend_in_raw_mode_with_nothing_that_acts_on_its_own() -> None:
    conf = settings_of(render_pgpool_conf(SESSION, (), layout()))
    assert conf["backend_clustering_mode"] == "'raw'"
    assert conf["backend_hostname0"] == "'127.0.0.1'" and conf["backend_port0"] == "5432"
    assert "backend_hostname1" not in conf
    assert conf["backend_flag0"] == "'DISALLOW_TO_FAILOVER'" and conf["failover_on_backend_error"] == "'off'"
    assert conf["health_check_period"] == "0" and conf["sr_check_period"] == "0"
    assert conf["load_balance_mode"] == "'off'"


def test_it_listens_on_loopback_only_and_pcp_on_no_tcp_address() -> None:
    conf = settings_of(render_pgpool_conf(SESSION, (), layout()))
    assert conf["listen_addresses"] == "'127.0.0.1'" and conf["port"] == "9999"
    assert conf["pcp_listen_addresses"] == "''"


def test_the_pool_size_is_the_number_of_children_each_caching_one_backend() -> None:
    conf = settings_of(render_pgpool_conf(PoolSettings(PoolMode.SESSION, 2), (), layout()))
    assert conf["num_init_children"] == "2" and conf["max_pool"] == "1" and conf["connection_cache"] == "'on'"


def test_the_reset_query_list_stays_at_the_version_s_default() -> None:
    assert "reset_query_list" not in settings_of(render_pgpool_conf(SESSION, (), layout()))


def test_transaction_pooling_is_refused_because_pgpool_has_none() -> None:
    with pytest.raises(ValueError, match="no transaction pooling"):
        render_pgpool_conf(PoolSettings(PoolMode.TRANSACTION, 1), (), layout())


@pytest.mark.parametrize(("version", "sockets", "work"), [
    ("4.3.5", "socket_dir", "logdir"), ("4.4.0", "unix_socket_directories", "logdir"),
    ("4.6.1", "unix_socket_directories", "logdir"), ("4.7.3", "unix_socket_directories", "work_dir"),
])
def test_sockets_pid_and_status_files_stay_in_the_run_s_folder_under_the_version_s_names(
    version: str, sockets: str, work: str
) -> None:
    conf = settings_of(render_pgpool_conf(SESSION, (), layout(version)))
    assert conf[sockets] == "'/run/x'" and conf[work] == "'/run/x'"
    assert conf["pcp_socket_dir"] == "'/run/x'" and conf["wd_ipc_socket_dir"] == "'/run/x'"
    assert conf["pid_file_name"] == "'/run/x/pgpool.pid'"
    assert not {"socket_dir", "unix_socket_directories", "logdir", "work_dir"} - {sockets, work} & set(conf)


def test_clients_need_a_password_checked_against_pool_passwd() -> None:
    conf = settings_of(render_pgpool_conf(SESSION, (), layout()))
    assert conf["enable_pool_hba"] == "'on'" and conf["pool_passwd"] == "'/run/x/pool_passwd'"
    assert render_pool_hba(layout()) == "local all all md5\nhost all all 127.0.0.1/32 md5\n"
    assert render_pool_passwd((("leakcheck", "a"), ("leakcheck_app", "b"))) == "leakcheck:TEXTa\nleakcheck_app:TEXTb\n"


def test_a_password_pool_passwd_cannot_hold_is_refused() -> None:
    with pytest.raises(ValueError, match="pool_passwd"):
        render_pool_passwd((("leakcheck", "a:b"),))


def test_pcp_s_user_is_stored_as_an_md5_hash() -> None:
    assert render_pcp_conf("leakcheck", "pw") == f"leakcheck:{hashlib.md5(b'pw').hexdigest()}\n"


def test_extra_settings_follow_leakcheck_s_and_one_named_like_one_of_them_replaces_it() -> None:
    text = render_pgpool_conf(SESSION, (("reset_query_list", "ABORT"), ("connection_cache", "off"),
                                        ("child_life_time", "0")), layout())
    conf = settings_of(text)
    assert conf["connection_cache"] == "'off'" and conf["reset_query_list"] == "'ABORT'"
    assert text.splitlines()[-2:] == ["reset_query_list = 'ABORT'", "child_life_time = 0"]


@pytest.mark.parametrize(("given", "written"), [
    ("10", "10"), ("on", "'on'"), ("ABORT; DISCARD ALL", "'ABORT; DISCARD ALL'"),
    ("a\\b", "'a\\b'"),  # pgpool-II keeps a backslash as written
])
def test_values_are_written_in_pgpool_s_syntax(given: str, written: str) -> None:
    assert value_of(given) == written


@pytest.mark.parametrize("bad", [("two words", "1"), ("x", "line\nbreak"), ("", "1"), ("x", "it's"), ("x", "a\\")])
def test_a_setting_that_would_break_the_file_is_refused(bad: tuple[str, str]) -> None:
    with pytest.raises(UsageError):
        render_pgpool_conf(SESSION, (bad,), layout())


def test_a_start_error_is_pgpool_s_last_fatal_line() -> None:
    log = ("2026-12-01 08:02:50.820: main pid 14842: LOG:  Backend status file /x/pgpool_status does not exist\n"
           '2026-12-01 08:02:50.821: main pid 14842: FATAL:  invalid value for parameter "num_init_children": "abc"\n')
    assert start_error(log) == 'invalid value for parameter "num_init_children": "abc"'
    assert start_error("2026-12-01 08:02:50.820: main pid 1: LOG:  started\n") is None
