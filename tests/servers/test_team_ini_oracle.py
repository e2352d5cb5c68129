"""leakcheck reads a team's pgbouncer.ini as PgBouncer does: for each file of team_ini/, what
team_ini.py makes of it equals what the real PgBouncer (1.18, 1.24, 1.26) shows in SHOW CONFIG for
every key the file writes, and a file PgBouncer refuses to load is refused by leakcheck too.
PgBouncer runs the team's file itself here (not leakcheck's rendering), as the server user."""

from __future__ import annotations

import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from leakcheck.model.errors import StartError, UsageError
from leakcheck.model.pool_settings import PoolSettings
from leakcheck.model.versions import parse_spec
from leakcheck.provision.host.process import ServerProcess
from leakcheck.provision.host.system import ServerUser, cache_root, free_port
from leakcheck.provision.pgbouncer import admin, team_ini
from leakcheck.provision.pgbouncer.binaries import resolve_bouncer
from leakcheck.provision.pgbouncer.ini_syntax import Assign, parse
from leakcheck.provision.pgbouncer.process import BouncerProcess
from leakcheck.provision.postgres.server import PgServer
from tests.pure.test_team_ini import OPEN_DOOR

pytestmark = pytest.mark.servers

CORPUS = Path(__file__).parent / "team_ini"
VERSIONS = ["1.18", "1.24", "1.26"]
READY_TIMEOUT = 10.0


@pytest.fixture
def folder(user: ServerUser) -> Iterator[Path]:
    """The test's folder: every user may enter it, the server user owns it (log, pid, socket)."""
    path = Path(tempfile.mkdtemp(prefix="leakcheck-test-ini-", dir="/tmp"))
    path.chmod(0o755)
    user.chown(path)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def placed(case: Path, folder: Path, user: ServerUser) -> tuple[Path, int, str]:
    """The case (and its .inc files) in `folder` with {harness} and {dir} filled in, the auth file,
    and (the placed case, its port, the admin's password); team_ini's cache cleared."""
    port, password = free_port(), secrets.token_hex(16)
    team_ini.load.cache_clear()
    harness = "\n".join([
        "listen_addr = 127.0.0.1", f"listen_port = {port}", f"unix_socket_dir = {folder}", "auth_type = md5",
        "admin_users = leakcheck", f"logfile = {folder}/pgbouncer.log", f"pidfile = {folder}/pgbouncer.pid",
    ])
    for source in [case, *case.parent.glob("*.inc")]:
        text = source.read_bytes().decode().replace("{harness}", harness).replace("{dir}", str(folder))
        (folder / source.name).write_bytes(text.encode())
        (folder / source.name).chmod(0o644)
    user.write_private(folder / "users.txt", f'"leakcheck" "{password}"\n')
    return folder / case.name, port, password


def run_pgbouncer(version: str, ini: Path, port: int, password: str, user: ServerUser) -> dict[str, tuple[str, str]]:
    """Start PgBouncer on `ini`; its SHOW CONFIG as key -> (value, default); always stopped."""
    binary = resolve_bouncer(parse_spec(version, "--bouncer"), cache_root())
    process = ServerProcess(f"PgBouncer {binary.version}", [*binary.argv, str(ini)], user, ini.parent,
                            ini.parent / "pgbouncer.out", stop_timeout=3.0)
    conninfo = f"host=127.0.0.1 port={port} user=leakcheck dbname=pgbouncer password={password}"

    def answers() -> str | None:
        try:
            with psycopg.connect(conninfo, autocommit=True, connect_timeout=2):
                return None
        except psycopg.Error as exc:
            return str(exc)

    try:
        process.start(answers, READY_TIMEOUT)
        with psycopg.connect(conninfo, autocommit=True, connect_timeout=2) as conn:
            rows = admin.execute(conn, "SHOW CONFIG")
        return {row["key"]: (row["value"], row["default"]) for row in rows}
    finally:
        process.stop()


def cases(kind: str) -> list[Path]:
    return sorted((CORPUS / kind).glob("*.ini"))


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("case", cases("loads"), ids=lambda p: p.stem)
def test_leakcheck_reads_each_file_as_the_running_pgbouncer_shows_it(
    case: Path, version: str, folder: Path, user: ServerUser
) -> None:
    ini, port, password = placed(case, folder, user)
    team = team_ini.load(str(ini))
    shown = run_pgbouncer(version, ini, port, password, user)
    events = parse(str(ini), lambda name, _via: Path(name).read_text(), "test")
    written = {e.key for e in events if isinstance(e, Assign)}
    keys = sorted(written & shown.keys())
    assert len(keys) >= 8  # the harness lines at least: the file was compared, not skipped
    ours = {key: team.value(key) or shown[key][1] for key in keys}  # unset: PgBouncer's default
    assert ours == {key: shown[key][0] for key in keys}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("case", cases("refused"), ids=lambda p: p.stem)
def test_a_file_pgbouncer_refuses_to_load_is_refused_by_leakcheck_too(
    case: Path, version: str, folder: Path, user: ServerUser
) -> None:
    ini, port, password = placed(case, folder, user)
    with pytest.raises(UsageError):
        team_ini.load(str(ini))
    with pytest.raises(StartError, match="exited with code"):
        run_pgbouncer(version, ini, port, password, user)


@pytest.mark.parametrize("version", VERSIONS)
def test_pgbouncer_refuses_a_key_in_another_case_and_leakcheck_refuses_it_first(
    version: str, folder: Path, user: ServerUser
) -> None:
    port, password = free_port(), secrets.token_hex(16)
    ini = folder / "case.ini"
    ini.write_text(f"[pgbouncer]\nListen_Addr = *\nlisten_addr = 127.0.0.1\nlisten_port = {port}\n"
                   f"unix_socket_dir = {folder}\nauth_file = {folder}/users.txt\nadmin_users = leakcheck\n")
    ini.chmod(0o644)
    user.write_private(folder / "users.txt", f'"leakcheck" "{password}"\n')
    team_ini.load.cache_clear()
    with pytest.raises(UsageError, match="Listen_Addr at .*case.ini:2 \\(keys are case-sensitive"):
        team_ini.load(str(ini))
    with pytest.raises(StartError, match="exited with code"):
        run_pgbouncer(version, ini, port, password, user)


def test_leakcheck_runs_a_file_that_would_open_doors_with_its_own_values(
    folder: Path, postgres: PgServer, user: ServerUser
) -> None:
    (folder / "team.ini").write_text(OPEN_DOOR)
    team_ini.load.cache_clear()
    team = team_ini.load(str(folder / "team.ini"))
    with BouncerProcess(resolve_bouncer(parse_spec("1.24", "--bouncer"), cache_root()), PoolSettings(),
                        postgres.endpoint(), user, team=team) as bouncer, admin.connect(bouncer.endpoint()) as conn:
        shown = admin.show_config(conn)
        assert bouncer.tmpdir is not None
        wanted = {"listen_addr": "127.0.0.1", "unix_socket_dir": "", "auth_type": "md5", "max_client_conn": "50",
                  "admin_users": "leakcheck", "auth_file": str(bouncer.tmpdir / "users.txt")}
        assert {key: shown[key] for key in wanted} == wanted


def test_a_pgbouncer_that_runs_with_another_value_of_a_harness_key_is_stopped_with_one_line(
    postgres: PgServer, user: ServerUser
) -> None:
    # An axis that escaped the --bouncer-set check: written after leakcheck's own line, so it wins.
    bouncer = BouncerProcess(resolve_bouncer(parse_spec("1.24", "--bouncer"), cache_root()), PoolSettings(),
                             postgres.endpoint(), user, extra=(("default_pool_size", "7"),))
    with pytest.raises(StartError) as caught:
        bouncer.__enter__()
    said = str(caught.value)
    assert "runs with default_pool_size = '7' (SHOW CONFIG), not leakcheck's '1'" in said and "\n" not in said
    assert "pgbouncer.ini" in said and not bouncer.running()
