"""Nothing a pooler leakcheck starts listens beyond 127.0.0.1 and its own folder's Unix sockets, and
each runs with leakcheck's own settings by its own SHOW commands: after every start, whatever reached
its config (real PgBouncer, Odyssey and pgpool-II; the settings go around the allow-list on purpose,
as one that slipped through would)."""

from __future__ import annotations

import json
import socket

import psycopg
import pytest

from leakcheck.model.errors import StartError
from leakcheck.model.pool_settings import PoolMode, PoolSettings
from leakcheck.model.versions import parse_spec
from leakcheck.provision.host import pooler_process, proc_sockets
from leakcheck.provision.host.pooler_process import PoolerProcess
from leakcheck.provision.host.proc_sockets import Listening, beyond, listening
from leakcheck.provision.host.system import ServerUser, cache_root, free_port, open_files_as
from leakcheck.provision.odyssey.process import OdysseyProcess
from leakcheck.provision.odyssey.product import resolve_odyssey
from leakcheck.provision.pgbouncer import admin
from leakcheck.provision.pgbouncer import settings as bouncer_settings
from leakcheck.provision.pgbouncer.binaries import resolve_bouncer
from leakcheck.provision.pgbouncer.fleet import BouncerFleet
from leakcheck.provision.pgbouncer.process import BouncerProcess
from leakcheck.provision.pgpool.process import PgpoolProcess
from leakcheck.provision.pgpool.product import resolve_pgpool
from leakcheck.provision.postgres.server import PgServer
from tests.support.servers import enterable_folder

pytestmark = pytest.mark.servers

Extra = tuple[tuple[str, str], ...]


def make(kind: str, postgres: PgServer, user: ServerUser, extra: Extra = ()) -> PoolerProcess:
    if kind == "odyssey":
        return OdysseyProcess(resolve_odyssey(parse_spec("1.5", "--pooler"), cache_root()), PoolSettings(), extra,
                              postgres.endpoint(), user)
    if kind.startswith("pgbouncer"):
        binary = resolve_bouncer(parse_spec(kind.removeprefix("pgbouncer"), "--bouncer"), cache_root())
        return BouncerProcess(binary, PoolSettings(), postgres.endpoint(), user, extra=extra)
    return PgpoolProcess(resolve_pgpool(parse_spec(kind, "--pooler"), cache_root()), PoolSettings(PoolMode.SESSION, 1),
                         extra, postgres.endpoint(), user)


def refused_start(pooler: PoolerProcess) -> str:
    """The one line entering `pooler` fails with; it was stopped and its folder removed."""
    try:
        with pytest.raises(StartError) as caught:
            pooler.__enter__()
    finally:
        if pooler.running():  # it started: stop it, the test has failed
            pooler.__exit__()
    assert not pooler.running() and pooler.tmpdir is None
    return str(caught.value).splitlines()[0]


def listens(pooler: PoolerProcess) -> list[Listening]:
    """What the pooler's processes listen on, read as leakcheck reads it."""
    pid = pooler._alive().pid
    assert pid is not None
    return listening(pid, pooler.forks, lambda pids: open_files_as(pooler.user, pids))


def nothing_listens_on(port: int) -> None:
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        with socket.socket(family) as probe:
            assert probe.connect_ex((host, port)) != 0


@pytest.mark.parametrize("kind", ["pgbouncer1.18", "pgbouncer1.26", "odyssey", "4.3", "4.6", "4.7"])
def test_a_pooler_started_as_leakcheck_writes_it_listens_on_loopback_and_its_own_folder_only(
    kind: str, postgres: PgServer, user: ServerUser
) -> None:
    with make(kind, postgres, user) as pooler:
        assert pooler.tmpdir is not None
        found = listens(pooler)
        assert Listening("tcp", "127.0.0.1", pooler.port) in found  # what it was told: the check sees it
        assert beyond(found, [str(pooler.tmpdir)]) == []
        if isinstance(pooler, PgpoolProcess):  # its client and PCP sockets, in its own folder
            assert {s.host for s in found if s.proto == "unix"} == {
                f"{pooler.tmpdir}/.s.PGSQL.{pooler.port}", f"{pooler.tmpdir}/.s.PGSQL.9898"}


def test_each_process_of_a_fleet_listens_on_the_shared_port_and_its_own_socket_only(
    postgres: PgServer, user: ServerUser
) -> None:
    binary = resolve_bouncer(parse_spec("1.24", "--bouncer"), cache_root())
    with BouncerFleet((binary, binary), PoolSettings(), postgres.endpoint(), user, (("peering", "yes"),)) as fleet:
        for member in fleet.members:
            assert member.tmpdir is not None
            found = listens(member)
            assert Listening("unix", f"{member.tmpdir}/.s.PGSQL.{member.port}") in found
            assert beyond(found, [str(member.tmpdir)]) == []


@pytest.mark.parametrize("kind", ["4.3", "4.7"])
def test_pgpool_told_to_listen_everywhere_is_stopped_in_one_line(kind: str, postgres: PgServer,
                                                                 user: ServerUser) -> None:
    pooler = make(kind, postgres, user, (("listen_addresses", "*"),))
    said = refused_start(pooler)
    assert f"listens on tcp:0.0.0.0:{pooler.port}" in said and "beyond 127.0.0.1" in said
    nothing_listens_on(pooler.port)


def test_pgpool_told_to_open_pcp_on_every_address_is_stopped(postgres: PgServer, user: ServerUser) -> None:
    said = refused_start(make("4.3", postgres, user, (("pcp_listen_addresses", "*"),)))
    assert "listens on " in said and ":9898" in said


def test_pgpool_running_with_another_login_than_leakcheck_wrote_is_stopped(postgres: PgServer,
                                                                          user: ServerUser) -> None:
    # enable_pool_hba=off: pgpool-II passes the login to PostgreSQL (which still asks for the password
    # here); leakcheck's pool_hba.conf is then not what decides, so the run stops.
    said = refused_start(make("4.3", postgres, user, (("enable_pool_hba", "off"),)))
    assert "runs with enable_pool_hba = 'off' (PGPOOL SHOW enable_pool_hba), not leakcheck's 'on'" in said


def test_odyssey_told_to_include_a_file_that_listens_everywhere_is_stopped_in_one_line(
    postgres: PgServer, user: ServerUser
) -> None:
    port = free_port()
    with enterable_folder() as folder:
        extra = folder / "extra.conf"
        extra.write_text(f'listen {{\n\thost "*"\n\tport {port}\n}}\n')
        extra.chmod(0o644)
        said = refused_start(make("odyssey", postgres, user, (("include", str(extra)),)))
    assert f"listens on tcp:0.0.0.0:{port}" in said or f"listens on tcp:[::]:{port}" in said
    nothing_listens_on(port)


def test_pgbouncer_told_to_listen_everywhere_is_stopped_before_its_first_use(postgres: PgServer,
                                                                            user: ServerUser) -> None:
    pooler = make("pgbouncer1.24", postgres, user, (("listen_addr", "*"),))
    said = refused_start(pooler)
    assert f"listens on tcp:0.0.0.0:{pooler.port}" in said
    nothing_listens_on(pooler.port)


def test_one_pgbouncer_that_runs_with_so_reuseport_is_stopped(postgres: PgServer, user: ServerUser) -> None:
    # Another process of the server user could then bind its port and take its clients.
    said = refused_start(make("pgbouncer1.24", postgres, user, (("so_reuseport", "1"),)))
    assert "runs with so_reuseport = '1' (SHOW CONFIG), not leakcheck's '0'" in said


# --- values that look like more config: one value each, held exactly; the pooler listens where told

def test_an_odyssey_value_that_looks_like_a_listen_block_stays_one_value(postgres: PgServer,
                                                                        user: ServerUser) -> None:
    value = "DISCARD ALL } listen { host * port 7 } database x { user y { pool session"
    with make("odyssey", postgres, user, (("pool_discard_query", value),)) as pooler:
        assert pooler.tmpdir is not None
        assert beyond(listens(pooler), [str(pooler.tmpdir)]) == []
    nothing_listens_on(7)


@pytest.mark.parametrize("kind", ["4.3", "4.7"])
def test_a_pgpool_value_with_backslashes_and_settings_in_it_is_held_exactly(kind: str, postgres: PgServer,
                                                                           user: ServerUser) -> None:
    value = "ABORT;listen_addresses = * \\ x \\\\"  # a backslash pair in the middle, two at the end
    with make(kind, postgres, user, (("reset_query_list", value),)) as pooler, \
            psycopg.connect(pooler.endpoint().conninfo(), autocommit=True) as conn:
        assert conn.execute("PGPOOL SHOW listen_addresses").fetchone() == ("127.0.0.1",)
        assert conn.execute("PGPOOL SHOW reset_query_list").fetchone() == (value,)


# --- through the command line: refused before any server starts --------------------------------

@pytest.mark.parametrize(("pooler", "axis", "said"), [
    ("pgpool:4.3", "pgpool:listen_addresses=*", "pgpool-II's listen_addresses is not a setting a team may set"),
    ("pgpool:4.3", "pgpool:enable_pool_hba=off", "pgpool-II's enable_pool_hba is not a setting a team may set"),
    ("odyssey:1.5", "odyssey:include=/etc/odyssey/odyssey.conf", "Odyssey's include is not a setting a team may set"),
    ("odyssey:1.5", "odyssey:no_such_setting=1", "Odyssey's no_such_setting is not a setting a team may set"),
    ("pgpool:4.3", "pgpool:reset_query_list=ABORT' listen_addresses = '*", "may not hold a single quote"),
])
def test_a_setting_that_would_open_a_door_is_refused_before_any_server_starts(
    pytester: pytest.Pytester, pooler: str, axis: str, said: str
) -> None:
    result = pytester.runpytest_inprocess("--pg=16", f"--pooler={pooler}", "--drivers=psycopg", "--controls=no",
                                          "--probes=timezone", f"--pooler-set={axis}", "--results=r.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.startswith("ERROR:")]
    assert len(errors) == 1 and said in errors[0]
    assert not (pytester.path / "r.json").exists()  # usage errors come before any server starts: no run


def test_a_normal_run_checks_what_its_poolers_listen_on(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess("--pg=16", "--pooler=odyssey:1.5,pgpool:4.3", "--drivers=psycopg",
                                          "--controls=no", "--probes=timezone", "--results=r.json")
    result.assert_outcomes(passed=1, skipped=1)  # pgpool-II: not applicable, both clients connected
    data = json.loads((pytester.path / "r.json").read_text())
    assert {o["verdict"] for o in data["outcomes"]} <= {"isolated", "leaks", "not_applicable"}


@pytest.mark.parametrize("version", ["1.18", "1.24", "1.26"])
def test_every_key_pgbouncer_shows_is_the_teams_or_leakcheck_s(version: str, postgres: PgServer,
                                                               user: ServerUser) -> None:
    # A release that adds a key fails here until it is put in one of the lists (after reading what it does).
    with make(f"pgbouncer{version}", postgres, user) as pooler, admin.connect(pooler.endpoint()) as conn:
        shown = set(admin.show_config(conn))
    lists = [bouncer_settings.TEAM.allowed - {"pool_mode"}, set(bouncer_settings.HARNESS_KEYS),
             set(bouncer_settings.DROPPED_KEYS)]
    assert shown <= set().union(*lists)
    assert not any(a & b for i, a in enumerate(lists) for b in lists[i + 1:])


def test_where_leakcheck_may_not_read_another_users_open_files_the_server_user_reads_them(
    postgres: PgServer, user: ServerUser, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As root without CAP_SYS_PTRACE (a container's default) /proc/<pid>/fd of the server user's pooler
    # cannot be read (scripts/test also runs this file under `capsh --drop=cap_sys_ptrace`, for real).
    monkeypatch.setattr(proc_sockets, "_fd_targets", lambda pid: None)
    with make("odyssey", postgres, user) as pooler:
        assert Listening("tcp", "127.0.0.1", pooler.port) in listens(pooler)
    pooler = make("pgbouncer1.24", postgres, user, (("listen_addr", "*"),))
    said = refused_start(pooler)
    assert f"listens on tcp:0.0.0.0:{pooler.port}" in said


def test_a_pooler_whose_sockets_cannot_be_read_at_all_is_not_used(
    postgres: PgServer, user: ServerUser, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(proc_sockets, "_fd_targets", lambda pid: None)
    monkeypatch.setattr(pooler_process, "open_files_as", lambda who, pids: [])
    said = refused_start(make("odyssey", postgres, user))
    assert "could not see what it listens on (not even its own port" in said
