"""Real PgBouncer 1.18, 1.24 and 1.26 resolved on this machine and started in front of a real PostgreSQL.

The first run fetches and builds into the cache (about a minute); later runs find them there.
"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import psycopg
import pytest

from leakcheck.model.errors import ProvisionError, StartError, UsageError
from leakcheck.model.pool_settings import PoolSettings
from leakcheck.model.versions import Spec, Version, parse_spec
from leakcheck.provision.base import Binary, Endpoint
from leakcheck.provision.host import pooler_process, system
from leakcheck.provision.host.system import ServerUser, cache_root
from leakcheck.provision.pgbouncer.binaries import resolve_bouncer
from leakcheck.provision.pgbouncer.process import BouncerProcess
from leakcheck.provision.postgres.server import PgServer
from leakcheck.provision.sources.program_folder import program_version

pytestmark = pytest.mark.servers

def _resolve(raw: str) -> Binary:
    return resolve_bouncer(parse_spec(raw, "--bouncer"), cache_root())


@pytest.mark.parametrize(
    ("raw", "exact"),
    [("1.18", "1.18.0"), ("1.24", "1.24.1"), ("1.26", "1.26.1"),
     ("1.18.0", "1.18.0"), ("1.24.1", "1.24.1"), ("1.26.1", "1.26.1")],
)
def test_each_reachable_version_resolves_to_the_release_its_binary_reports(raw: str, exact: str) -> None:
    binary = _resolve(raw)
    assert binary.version == Version.parse(exact)
    assert program_version(binary.argv) == binary.version
    assert binary.origin


@pytest.mark.parametrize("raw", ["1.18", "1.24", "1.26"])
def test_a_started_bouncer_answers_show_version_and_passes_select_1_through(
    raw: str, postgres: PgServer, user: ServerUser
) -> None:
    binary = _resolve(raw)
    with BouncerProcess(binary, PoolSettings(), postgres.endpoint(), user) as bouncer:
        endpoint = bouncer.endpoint()
        assert endpoint.host == "127.0.0.1"
        with psycopg.connect(endpoint.conninfo("pgbouncer"), autocommit=True) as admin:
            result = admin.pgconn.exec_(b"SHOW VERSION")
            assert str(binary.version) in (result.get_value(0, 0) or b"").decode()
        with psycopg.connect(endpoint.conninfo(), autocommit=True) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
            assert conn.execute("SELECT current_database()").fetchone() == (endpoint.dbname,)
    assert "process up" in bouncer.log_text() or "listening on" in bouncer.log_text()


def test_leaving_stops_pgbouncer_and_removes_its_temp_dir(postgres: PgServer, user: ServerUser) -> None:
    bouncer = BouncerProcess(_resolve("1.24"), PoolSettings(), postgres.endpoint(), user)
    with bouncer:
        tmpdir, port = bouncer.tmpdir, bouncer.port
        assert tmpdir is not None and tmpdir.is_dir()
    assert not tmpdir.exists()
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0


def test_a_port_taken_before_pgbouncer_binds_it_is_retried_on_another(
    postgres: PgServer, user: ServerUser, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        ports = iter([busy])
        real_free_port = system.free_port
        monkeypatch.setattr(pooler_process, "free_port", lambda: next(ports, None) or real_free_port())
        with BouncerProcess(_resolve("1.26"), PoolSettings(), postgres.endpoint(), user) as bouncer:
            assert bouncer.port != busy
            with psycopg.connect(bouncer.endpoint().conninfo(), autocommit=True) as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_bouncer_that_exits_at_start_raises_with_its_log_and_leaves_nothing(user: ServerUser) -> None:
    script = "echo 'FATAL cannot load config' >&2; exit 3"
    failing = Binary(Version((1, 24, 1)), ("/bin/sh", "-c", script, "sh"), "a test stand-in")
    bouncer = BouncerProcess(failing, PoolSettings(), Endpoint("127.0.0.1", 1), user)
    with pytest.raises(StartError, match="cannot load config") as raised:
        bouncer.__enter__()
    assert "exited with code 3" in str(raised.value)
    assert bouncer.tmpdir is None


def test_a_version_nobody_offers_fails_naming_every_attempt() -> None:
    with pytest.raises(ProvisionError) as raised:
        _resolve("1.21")
    message = str(raised.value)
    assert "\n" not in message
    for tried in ("cache", "PATH", "LEAKCHECK_PGBOUNCER_TARBALLS", "Debian bookworm, trixie, sid (has "):
        assert tried in message
    assert message.startswith("could not obtain PgBouncer 1.21: tried ")


def test_an_explicit_path_is_used_as_given() -> None:
    path = _resolve("1.24.1").argv[0]
    binary = resolve_bouncer(Spec(raw=path, path=Path(path)), cache_root())
    assert binary.version == Version((1, 24, 1)) and binary.argv == (path,)


def test_an_explicit_path_that_is_not_pgbouncer_fails_at_once(tmp_path: Path) -> None:
    missing = tmp_path / "pgbouncer"
    with pytest.raises(UsageError, match="there is no file"):
        resolve_bouncer(Spec(raw=str(missing), path=missing), cache_root())


def test_the_cache_is_readable_by_the_user_servers_run_as(user: ServerUser) -> None:
    binary = _resolve("1.26")
    uid, gid, groups = user.popen_ids()
    done = subprocess.run([*binary.argv, "--version"], capture_output=True, text=True, user=uid, group=gid,
                          extra_groups=groups, timeout=30, check=False)
    assert done.returncode == 0 and done.stdout.startswith("PgBouncer 1.26"), done.stdout + done.stderr
