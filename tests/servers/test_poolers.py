"""Real Odyssey and pgpool-II resolved on this machine and started in front of a real PostgreSQL.

The first run fetches Debian's packages into the cache (about 20 s each); later runs find them.
These tests check the mechanics leakcheck guarantees (start, answer, reset, stop, errors); what the
poolers do with session state is measured in test_poolers_measured.py, never asserted here.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from leakcheck.model.errors import ProvisionError, StartError, UsageError
from leakcheck.model.pool_settings import PoolMode, PoolSettings
from leakcheck.model.versions import Spec, Version, parse_spec
from leakcheck.provision.base import Binary, Endpoint
from leakcheck.provision.containers.odyssey_pgpool_files import pgpool_reset_script
from leakcheck.provision.host.owner import start_time
from leakcheck.provision.host.pooler_process import PoolerProcess
from leakcheck.provision.host.proc_sockets import children_of, connected_to, idle_children
from leakcheck.provision.host.strays import servers_in
from leakcheck.provision.host.sweep import sweep
from leakcheck.provision.host.system import ServerUser, cache_root
from leakcheck.provision.odyssey.process import OdysseyProcess
from leakcheck.provision.odyssey.product import resolve_odyssey
from leakcheck.provision.pgpool.process import PgpoolProcess
from leakcheck.provision.pgpool.product import resolve_pgpool
from leakcheck.provision.postgres.server import PgServer
from leakcheck.provision.sources.program_folder import program_version
from leakcheck.provision.sources.programs import ODYSSEY, PGPOOL
from tests.support.servers import enterable_folder

pytestmark = pytest.mark.servers

PGPOOLS = ("4.3", "4.6", "4.7")
#: Both proofs of a server connection, read in one statement (as leakcheck's probes do).
IDENTITY = "SELECT pg_backend_pid(), (pg_stat_get_activity(pg_backend_pid())).backend_start"
APP = "leakcheck_app"


def odyssey() -> Binary:
    return resolve_odyssey(parse_spec("1.5", "--odyssey"), cache_root())


def pgpool(raw: str) -> Binary:
    return resolve_pgpool(parse_spec(raw, "--pgpool"), cache_root())


def make(kind: str, postgres: PgServer, user: ServerUser, settings: PoolSettings | None = None,
         extra: tuple[tuple[str, str], ...] = ()) -> PoolerProcess:
    if kind == "odyssey":
        return OdysseyProcess(odyssey(), settings or PoolSettings(), extra, postgres.endpoint(), user)
    return PgpoolProcess(pgpool(kind), settings or PoolSettings(PoolMode.SESSION, 1), extra, postgres.endpoint(), user)


def identity(endpoint: Endpoint) -> tuple[Any, ...]:
    with psycopg.connect(endpoint.as_user(APP).conninfo(), autocommit=True) as conn:
        row = conn.execute(IDENTITY).fetchone()
    assert row is not None
    return tuple(row)


def processes_of(pooler: PoolerProcess) -> list[int]:
    main = pooler._alive().pid
    assert main is not None
    return [main, *children_of(main)]


@pytest.mark.parametrize(("resolve", "raw", "exact"), [
    (resolve_odyssey, "1.5", "1.5.2"), (resolve_odyssey, "1.5.2", "1.5.2"),
    (resolve_pgpool, "4.3", "4.3.5"), (resolve_pgpool, "4.6", "4.6.1"), (resolve_pgpool, "4.7", "4.7.3"),
    (resolve_pgpool, "4.7.3", "4.7.3"),
])
def test_each_reachable_version_resolves_to_the_release_its_binary_reports(resolve: Any, raw: str, exact: str) -> None:
    binary = resolve(parse_spec(raw, "--x"), cache_root())
    program = ODYSSEY if resolve is resolve_odyssey else PGPOOL
    assert binary.version == Version.parse(exact)
    assert program_version(binary.argv, program) == binary.version
    assert binary.origin


def test_a_version_nobody_offers_fails_naming_every_attempt() -> None:
    with pytest.raises(ProvisionError) as raised:
        resolve_pgpool(parse_spec("4.5", "--pgpool"), cache_root())
    message = str(raised.value)
    assert "\n" not in message and message.startswith("could not obtain pgpool-II 4.5: tried ")
    for tried in ("cache", "PATH", "Debian bookworm, trixie, sid (has 4.3.5, 4.6.1, 4.7.3)"):
        assert tried in message


def test_a_given_path_is_used_as_given_and_another_program_is_refused(tmp_path: Path) -> None:
    wrapper = tmp_path / "odyssey"  # how a user might run an extracted build: a script around its loader
    wrapper.write_text("#!/bin/sh\nexec " + " ".join(odyssey().argv) + ' "$@"\n')
    wrapper.chmod(0o755)
    given = resolve_odyssey(Spec(raw=str(wrapper), path=wrapper), cache_root())
    assert given.argv == (str(wrapper),) and given.version == Version((1, 5, 2))
    with pytest.raises(UsageError, match="is not Odyssey: `/bin/true --version` printed .true \\(GNU coreutils\\)"):
        resolve_odyssey(Spec(raw="/bin/true", path=Path("/bin/true")), cache_root())
    with pytest.raises(UsageError, match="there is no file .*; give the path of a pgpool binary"):
        resolve_pgpool(Spec(raw=str(tmp_path / "pgpool"), path=tmp_path / "pgpool"), cache_root())


@pytest.mark.parametrize("kind", ["odyssey", *PGPOOLS])
def test_a_started_pooler_passes_queries_through_on_loopback_as_the_server_user(
    kind: str, postgres: PgServer, user: ServerUser
) -> None:
    with make(kind, postgres, user) as pooler:
        endpoint = pooler.endpoint()
        assert endpoint.host == "127.0.0.1"
        with psycopg.connect(endpoint.as_user(APP).conninfo(), autocommit=True) as conn:
            assert conn.execute("SELECT current_user, current_database()").fetchone() == (APP, "leakcheck")
        for pid in processes_of(pooler):
            assert Path(f"/proc/{pid}").stat().st_uid == user.uid


@pytest.mark.parametrize("kind", ["odyssey", "4.3"])
def test_a_wrong_password_is_refused(kind: str, postgres: PgServer, user: ServerUser) -> None:
    with make(kind, postgres, user) as pooler:
        wrong = Endpoint("127.0.0.1", pooler.port, user=APP, credentials=((APP, "not-the-password"),))
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(wrong.conninfo(), connect_timeout=5).close()


@pytest.mark.parametrize("kind", ["odyssey", *PGPOOLS])
def test_leaving_stops_every_process_and_removes_the_temp_dir(kind: str, postgres: PgServer, user: ServerUser) -> None:
    pooler = make(kind, postgres, user, PoolSettings(PoolMode.SESSION, 2) if kind != "odyssey" else None)
    with pooler:
        identity(pooler.endpoint())
        pids = {pid: start_time(pid) for pid in processes_of(pooler)}
        tmpdir, port = pooler.tmpdir, pooler.port
        assert tmpdir is not None and tmpdir.is_dir()
        assert set(servers_in(tmpdir)) == set(pids)  # what the sweep of a killed run would stop
    assert not tmpdir.exists()
    assert all(start_time(pid) != started for pid, started in pids.items())
    ipc = [line.split() for line in Path("/proc/sysvipc/shm").read_text().splitlines()[1:]]
    assert not [row for row in ipc if int(row[4]) in pids]  # cpid: pgpool-II's segments are gone with it
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.parametrize("kind", ["odyssey", *PGPOOLS])
def test_reset_gives_the_next_client_a_fresh_server_connection(kind: str, postgres: PgServer, user: ServerUser) -> None:
    with make(kind, postgres, user) as pooler:
        seen = [identity(pooler.endpoint())]
        for _ in range(3):
            pooler.reset()
            if isinstance(pooler, PgpoolProcess):  # no process of it holds a connection to the server
                assert connected_to(processes_of(pooler), "127.0.0.1", postgres.port) == []
            seen.append(identity(pooler.endpoint()))
        assert len(set(seen)) == len(seen), seen


@pytest.mark.parametrize("kind", ["odyssey", "4.7"])
def test_a_reset_from_another_thread_keeps_the_pooler_running(kind: str, postgres: PgServer, user: ServerUser) -> None:
    with make(kind, postgres, user) as pooler:
        before = identity(pooler.endpoint())
        done: list[BaseException | None] = []

        def lane() -> None:
            try:
                pooler.reset()
                done.append(None)
            except BaseException as exc:  # noqa: BLE001 - reported below
                done.append(exc)

        thread = threading.Thread(target=lane)  # a lane's thread; it lives on after the reset
        thread.start()
        thread.join()
        assert done == [None]
        assert pooler.running() and identity(pooler.endpoint()) != before


@pytest.mark.parametrize("kind", PGPOOLS)
def test_entering_pgpool_leaves_no_cached_backend_behind(kind: str, postgres: PgServer, user: ServerUser) -> None:
    with make(kind, postgres, user) as pooler, psycopg.connect(postgres.endpoint().conninfo(), autocommit=True) as pg:
        ports = pg.execute("SELECT count(*) FROM pg_stat_activity WHERE client_port IS NOT NULL "
                           "AND pid <> pg_backend_pid() AND usename IN ('leakcheck', 'leakcheck_app')").fetchone()
        assert ports == (0,), f"{pooler.title} holds server connections before its first use"


def test_an_unknown_odyssey_setting_fails_with_odyssey_s_own_message_in_one_line(
    postgres: PgServer, user: ServerUser
) -> None:
    pooler = make("odyssey", postgres, user, extra=(("zz_no_such_setting", "yes"),))
    with pytest.raises(StartError) as raised:
        pooler.__enter__()
    first = str(raised.value).splitlines()[0]
    assert "unknown parameter" in first and "`zz_no_such_setting yes`" in first
    assert pooler.tmpdir is None


def test_an_odyssey_setting_in_its_rule_is_accepted(postgres: PgServer, user: ServerUser) -> None:
    extra = (("pool_reserve_prepared_statement", "no"), ("pool_discard", "no"), ("workers", "1"))
    with make("odyssey", postgres, user, extra=extra) as pooler:
        identity(pooler.endpoint())


@pytest.mark.parametrize("kind", PGPOOLS)
def test_an_unknown_pgpool_setting_fails_with_pgpool_s_own_answer_in_one_line(
    kind: str, postgres: PgServer, user: ServerUser
) -> None:
    pooler = make(kind, postgres, user, extra=(("zz_no_such_setting", "1"),))
    with pytest.raises(StartError) as raised:
        pooler.__enter__()
    first = str(raised.value).splitlines()[0]
    assert 'config variable "zz_no_such_setting" not found' in first
    assert pooler.tmpdir is None and not pooler.running()


def test_a_bad_pgpool_value_fails_with_pgpool_s_fatal_line(postgres: PgServer, user: ServerUser) -> None:
    pooler = make("4.3", postgres, user, extra=(("num_init_children", "abc"),))
    with pytest.raises(StartError, match='invalid value for parameter "num_init_children"'):
        pooler.__enter__()


@pytest.mark.parametrize("kind", PGPOOLS)
def test_pgpool_takes_quoted_booleans_and_lists_as_extra_settings(
    kind: str, postgres: PgServer, user: ServerUser
) -> None:
    extra = (("connection_cache", "off"), ("reset_query_list", "ABORT; RESET ALL"))
    with make(kind, postgres, user, extra=extra) as pooler, \
            psycopg.connect(pooler.endpoint().conninfo(), autocommit=True) as conn:
        assert conn.execute("PGPOOL SHOW connection_cache").fetchone() == ("off",)
        shown = conn.execute("PGPOOL SHOW reset_query_list").fetchone()
        assert shown is not None and shown[0].replace("; ", ";") == "ABORT;RESET ALL"


@pytest.mark.parametrize("kind", PGPOOLS)
def test_the_container_reset_script_replaces_every_connection_child(
    kind: str, postgres: PgServer, user: ServerUser
) -> None:
    with make(kind, postgres, user, PoolSettings(PoolMode.SESSION, 2)) as pooler:
        before_identity = identity(pooler.endpoint())
        main = pooler._alive().pid
        assert main is not None
        before = set(idle_children(main))
        uid, gid, groups = user.popen_ids()
        done = subprocess.run(["sh", "-c", pgpool_reset_script(2, main)], user=uid, group=gid, extra_groups=groups,
                              timeout=30, check=False)
        assert done.returncode == 0
        after = set(idle_children(main))
        assert len(after) == 2 and not after & before
        assert connected_to(processes_of(pooler), "127.0.0.1", postgres.port) == []
        assert identity(pooler.endpoint()) != before_identity

CHILD = """
import json, sys, time
from leakcheck.provision.base import Endpoint
from leakcheck.model.pool_settings import PoolMode, PoolSettings
from leakcheck.provision.odyssey.process import OdysseyProcess
from leakcheck.provision.pgpool.process import PgpoolProcess
from leakcheck.provision.odyssey.product import resolve_odyssey
from leakcheck.provision.pgpool.product import resolve_pgpool
from leakcheck.provision.host.system import cache_root, server_user
from leakcheck.model.versions import parse_spec

server = Endpoint(**json.loads(sys.argv[1]))
ody = OdysseyProcess(resolve_odyssey(parse_spec("1.5", "x"), cache_root()), PoolSettings(), (), server, server_user())
pgp = PgpoolProcess(resolve_pgpool(parse_spec("4.7", "x"), cache_root()), PoolSettings(PoolMode.SESSION, 2), (),
                    server, server_user())
with ody, pgp:
    ody.reset()  # the Odyssey that runs now was forked by its spawner thread
    print(json.dumps({"odyssey": ody._alive().pid, "pgpool": pgp._alive().pid}), flush=True)
    time.sleep(60)
"""


@pytest.fixture
def run_tmp() -> Iterator[Path]:
    """A TMPDIR of the run's own that the server user may enter (pytest's tmp_path is private to us)."""
    with enterable_folder() as folder:
        yield folder


def test_poolers_of_a_killed_run_die_with_it_and_the_next_run_sweeps_their_folders(
    postgres: PgServer, run_tmp: Path
) -> None:
    endpoint = postgres.endpoint()
    server = {"host": endpoint.host, "port": endpoint.port, "credentials": [list(c) for c in endpoint.credentials]}
    with subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(server)], stdout=subprocess.PIPE, text=True,
                          env={**os.environ, "TMPDIR": str(run_tmp)}, start_new_session=True) as child:
        try:
            assert child.stdout is not None
            mains = json.loads(child.stdout.readline())
            pgpool_family = [mains["pgpool"], *children_of(mains["pgpool"])]
            watched = {pid: start_time(pid) for pid in [mains["odyssey"], *pgpool_family]}
            folders = sorted(p.name.split("-")[1] for p in run_tmp.iterdir())
            assert folders == ["odyssey1.5.2", "pgpool4.7.3"]
        finally:
            child.kill()  # SIGKILL: no cleanup code of the run runs
    deadline = time.monotonic() + 10
    while any(start_time(pid) == started for pid, started in watched.items()):
        assert time.monotonic() < deadline, "a pooler process outlived the run that started it"
        time.sleep(0.05)
    ipc = [line.split() for line in Path("/proc/sysvipc/shm").read_text().splitlines()[1:]]
    assert not [row for row in ipc if int(row[4]) in watched]  # pgpool-II removed its segments (SIGINT)
    assert len(sweep(tmp=run_tmp)) == 2
    assert list(run_tmp.iterdir()) == []
