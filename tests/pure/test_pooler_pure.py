"""The poolers' other pure parts: banners, /proc parsing, process titles, container files."""

from __future__ import annotations

import re
import signal

import pytest

from leakcheck.model.pool_settings import PoolMode, PoolSettings
from leakcheck.model.versions import Version
from leakcheck.provision.containers import odyssey_pgpool_files as pc
from leakcheck.provision.host.proc_sockets import PGPOOL_IDLE, parent_of, parse_tcp_table, title_of
from leakcheck.provision.host.process import exit_reason
from leakcheck.provision.host.strays import program_in
from leakcheck.provision.sources import banners

ROLES = (("leakcheck", "s3cret"), ("leakcheck_app", "x"))


@pytest.mark.parametrize(("first_line", "banner", "version"), [
    ("odyssey 1.5.2 release +pam -ldap +systemd -prom", banners.ODYSSEY, "1.5.2"),  # Debian sid's
    ("pgpool-II version 4.3.5 (tamahomeboshi)", banners.PGPOOL, "4.3.5"),
    ("pgpool-II version 4.6.1 (chirikoboshi)", banners.PGPOOL, "4.6.1"),
    ("pgpool-II version 4.7.3 (tasukiboshi)", banners.PGPOOL, "4.7.3"),
])
def test_each_pooler_s_banner_gives_its_version(first_line: str, banner: re.Pattern[str], version: str) -> None:
    assert banners.banner_version(first_line, banner) == Version.parse(version)


@pytest.mark.parametrize("first_line", ["PgBouncer 1.24.1", "pgpool version 4.3.5", "odyssey", "Odyssey 1.5"])
def test_another_program_s_banner_is_no_pooler_s(first_line: str) -> None:
    assert banners.banner_version(first_line, banners.ODYSSEY) is None
    assert banners.banner_version(first_line, banners.PGPOOL) is None


TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000   101        0 4711 1 0 100 0 0 10 0
   1: 0100007F:D2F4 0100007F:1538 01 00000000:00000000 00:00000000 00000000   101        0 4712 1 0 20 4 30 10 -1
   2: 0100007F:D2F6 0100007F:1538 06 00000000:00000000 03:00000CE1 00000000     0        0 0 3 0
"""
TCP6 = (
    "  sl  local_address                         remote_address                        st ...\n"
    "   0: 0000000000000000FFFF00000100007F:D2F8 0000000000000000FFFF00000100007F:1538 01 "
    "00000000:00000000 00:00000000 00000000   101        0 4713 1\n"
)


def test_the_tcp_table_gives_each_socket_s_remote_end() -> None:
    assert parse_tcp_table(TCP) == {4711: ("0.0.0.0", 0), 4712: ("127.0.0.1", 5432), 0: ("127.0.0.1", 5432)}
    assert parse_tcp_table(TCP6) == {4713: ("127.0.0.1", 5432)}  # an IPv4-mapped address, as IPv4


def test_the_tcp_table_can_be_read_for_chosen_sockets_only() -> None:
    assert parse_tcp_table(TCP, {4712, 99}) == {4712: ("127.0.0.1", 5432)}
    assert parse_tcp_table(TCP, set()) == {}


def test_the_parent_is_read_after_the_command_name_whatever_it_holds() -> None:
    assert parent_of("4242 (pgpool: a) b) S 4200 4200 4200 0 -1") == 4200


def test_pgpool_s_process_title_is_read_from_over_its_arguments() -> None:
    loader_run = (b"/c/ld-linux-x86-64.so.2\0--inhibit-cache\0--library-path\0/c/lib\0"
                  b"pgpool: wait for connection request\0\0\0\0")
    assert title_of(loader_run) == PGPOOL_IDLE
    assert title_of(b"pgpool: leakcheck_app leakcheck 127.0.0.1(4711) idle\0\0") == (
        "pgpool: leakcheck_app leakcheck 127.0.0.1(4711) idle")
    assert title_of(b"/usr/sbin/pgpool\0-n\0-f\0/x/pgpool.conf\0") == ""


@pytest.mark.parametrize(("arg", "program"), [
    ("/var/cache/leakcheck/pgpool/4.3.5/root/usr/sbin/pgpool", "pgpool"),
    ("pgpool: wait for connection request", "pgpool"),  # pgpool-II's process titles
    ("odyssey 1.5.2 listening and accepting new connections ", "odyssey"),  # Odyssey's
    ("/tmp/a b/pgbouncer", "pgbouncer"),
    ("/x/usr/lib/x86_64-linux-gnu:/x/lib/x86_64-linux-gnu", ""),
    ("--library-path", ""),
])
def test_a_process_argument_names_the_program_by_its_path_or_its_title(arg: str, program: str) -> None:
    assert program_in(arg) == program


def test_an_exit_says_its_code_or_the_signal_that_ended_it() -> None:
    assert exit_reason(3) == "it exited with code 3"
    assert exit_reason(-signal.SIGABRT) == "it was ended by SIGABRT"


def test_odyssey_s_container_files_listen_everywhere_and_reach_the_postgres_alias() -> None:
    files = pc.odyssey_files(PoolSettings(), (("pool_discard", "no"),), ROLES)
    text = files["/leakcheck/odyssey.conf"].decode()
    assert list(files) == ["/leakcheck/odyssey.conf"]
    assert 'host "0.0.0.0"\n\tport 6432' in text and 'host "postgres"\n\tport 5432' in text
    assert 'pool "transaction"' in text and "pool_discard no" in text and 'password "s3cret"' in text


def test_pgpool_s_container_files_listen_everywhere_and_keep_their_run_files_in_tmp() -> None:
    files = pc.pgpool_files(Version.parse("4.7.3"), PoolSettings(PoolMode.SESSION, 2), (), ROLES)
    assert sorted(files) == ["/leakcheck/pcp.conf", "/leakcheck/pgpool.conf", "/leakcheck/pool_hba.conf",
                             "/leakcheck/pool_passwd"]
    conf = files["/leakcheck/pgpool.conf"].decode()
    for line in ("listen_addresses = '0.0.0.0'", "port = 6432", "backend_hostname0 = 'postgres'",
                 "backend_port0 = 5432", "work_dir = '/tmp'", "unix_socket_directories = '/tmp'",
                 "pool_passwd = '/leakcheck/pool_passwd'", "num_init_children = 2"):
        assert line + "\n" in conf
    assert files["/leakcheck/pool_hba.conf"] == b"local all all md5\nhost all all 0.0.0.0/0 md5\n"
    assert files["/leakcheck/pool_passwd"] == b"leakcheck:TEXTs3cret\nleakcheck_app:TEXTx\n"


def test_the_container_commands_name_the_copied_files() -> None:
    assert pc.ODYSSEY_COMMAND == ("/leakcheck/odyssey.conf",)
    assert pc.PGPOOL_COMMAND == ("-n", "-f", "/leakcheck/pgpool.conf", "-F", "/leakcheck/pcp.conf",
                                 "-a", "/leakcheck/pool_hba.conf")
    reset = pc.pgpool_reset_command(2)
    assert reset[:2] == ("sh", "-c") and reset[2].startswith("n=2; parent=1; ")


def test_pgpool_runs_one_connection_child_per_place_in_the_pool_unless_num_init_children_is_set() -> None:
    from leakcheck.provision.pgpool.process import children

    assert children(PoolSettings(PoolMode.SESSION, 2), ()) == 2
    assert children(PoolSettings(PoolMode.SESSION, 2), (("num_init_children", "5"),)) == 5


def test_a_pooler_asked_of_the_containers_backend_without_its_image_says_which_option_to_give() -> None:
    from leakcheck.model.target import PoolerKind
    from leakcheck.model.versions import parse_spec

    error = pc.missing_image(PoolerKind.PGPOOL, parse_spec("4.3", "--pooler"))
    assert str(error) == ("--pooler=pgpool:4.3 on the containers backend needs an image: give --pgpool-image (e.g. "
                          "--pgpool-image='leakcheck-local/pgpool:{version}', built from docker/pgpool: see "
                          "docker/README.md)")


def test_the_container_reset_script_reads_process_titles_without_noise_about_processes_that_ended() -> None:
    assert '2>/dev/null < "$d/cmdline"' in pc.pgpool_reset_script(2)
