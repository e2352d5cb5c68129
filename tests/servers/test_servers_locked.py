"""Nobody else on the machine can use a run's servers: every door needs this run's password."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest

from leakcheck.model.pool_settings import PoolSettings
from leakcheck.model.target import Pooler, PoolerKind
from leakcheck.model.versions import Version
from leakcheck.provision.base import Endpoint
from leakcheck.provision.host.system import cache_root
from leakcheck.provision.native import NativeBackend
from leakcheck.provision.pgbouncer.process import BouncerProcess
from leakcheck.provision.postgres.fixtures import APP_ROLE
from tests.support.servers import TEST_BOUNCER, TEST_PG, Measure

pytestmark = pytest.mark.servers

#: Another local user, for the checks that depend on who is asking.
STRANGER = "nobody"


@pytest.fixture(scope="module")
def bouncer(native: NativeBackend, measure: Measure) -> Iterator[tuple[Endpoint, Endpoint]]:
    pg = measure.pg(TEST_PG[0])
    server = native._server(pg)
    binary = native._binaries[(PoolerKind.PGBOUNCER, _version(measure.bouncer(TEST_BOUNCER[-1])))]
    process = BouncerProcess(binary, PoolSettings(), server.endpoint(), native.user)
    with process:
        yield server.endpoint(), process.endpoint()


def _version(pooler: Pooler) -> Version:
    assert pooler.version is not None
    return pooler.version


def _refused(endpoint: Endpoint, dbname: str | None = None) -> str:
    with pytest.raises(psycopg.OperationalError) as raised:
        psycopg.connect(endpoint.conninfo(dbname), connect_timeout=5).close()
    return str(raised.value)


@pytest.mark.parametrize("door", ["postgres", "pgbouncer", "pgbouncer admin console"])
@pytest.mark.parametrize("role", ["leakcheck", APP_ROLE])
def test_without_the_run_password_no_role_gets_in(bouncer: tuple[Endpoint, Endpoint], door: str, role: str) -> None:
    postgres, pooled = bouncer
    endpoint = postgres if door == "postgres" else pooled
    dbname = "pgbouncer" if door.endswith("console") else None
    stranger = replace(endpoint.as_user(role), credentials=((role, "guessed"),))
    reasons = ("password authentication failed", "SASL authentication failed", "not allowed")
    assert any(r in _refused(stranger, dbname) for r in reasons)
    nothing = replace(endpoint.as_user(role), credentials=())
    assert any(r in _refused(nothing, dbname) for r in (*reasons, "no password supplied"))


def test_the_app_role_may_not_use_the_admin_console_even_with_its_password(
    bouncer: tuple[Endpoint, Endpoint],
) -> None:
    _, pooled = bouncer
    assert "not allowed" in _refused(pooled.as_user(APP_ROLE), "pgbouncer")


def test_with_the_run_password_the_app_role_gets_in_and_is_no_superuser(bouncer: tuple[Endpoint, Endpoint]) -> None:
    _, pooled = bouncer
    with psycopg.connect(pooled.as_user(APP_ROLE).conninfo(), autocommit=True) as conn:
        row = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
    assert row == (False,)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another local user")
def test_another_local_user_cannot_reach_the_trusted_unix_socket(native: NativeBackend, measure: Measure) -> None:
    server = native._server(measure.pg(TEST_PG[0]))
    assert server.tmpdir is not None
    sock = server.tmpdir / "sock"
    path = sock / f".s.PGSQL.{server.port}"
    assert path.is_socket()  # root may; the server user may
    code = f"import socket; socket.socket(socket.AF_UNIX).connect({str(path)!r}); print('connected')"
    done = subprocess.run(["runuser", "-u", STRANGER, "--", "/usr/bin/python3", "-c", code],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "PermissionError" in done.stderr, done.stdout + done.stderr
    assert oct(server.tmpdir.stat().st_mode & 0o777) == "0o700"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as other local users")
def test_the_cache_is_open_to_the_server_user_and_closed_to_everyone_else(
    monkeypatch: pytest.MonkeyPatch, native: NativeBackend
) -> None:
    cache = Path(tempfile.mkdtemp(prefix="leakcheck-test-cache-"))
    try:
        monkeypatch.setenv("LEAKCHECK_CACHE", str(cache))
        assert cache_root() == cache
        assert oct(cache.stat().st_mode & 0o777) == "0o750" and cache.stat().st_gid == native.user.gid

        def lists(user: str) -> bool:
            return subprocess.run(["runuser", "-u", user, "--", "ls", str(cache)], capture_output=True,
                                  timeout=30, check=False).returncode == 0

        assert lists(native.user.name)
        assert native.user.name == STRANGER or not lists(STRANGER)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
