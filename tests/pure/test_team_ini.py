"""A team's own pgbouncer.ini: read as written, run with only what the harness must control overridden."""

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from leakcheck.model.errors import UsageError
from leakcheck.model.pool_settings import PoolSettings
from leakcheck.provision.host.system import server_user
from leakcheck.provision.pgbouncer import team_ini
from leakcheck.provision.pgbouncer.ini import BouncerLayout, render_ini
from leakcheck.provision.pgbouncer.settings import HARNESS_KEYS, header_keys


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A folder every user can enter (pytest's own is private to root, and the server user must be
    able to read a team's ini); its files are written 0644 as usual."""
    folder = Path(tempfile.mkdtemp(prefix="leakcheck-test-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


LAYOUT = BouncerLayout(
    listen_port=6432, server_host="127.0.0.1", server_port=5432, dbname="leakcheck", user="leakcheck",
    auth_file="/x/users.txt", logfile="/x/pgbouncer.log", pidfile="/x/pgbouncer.pid",
)

TEAM = """\
; our production PgBouncer
[databases]
app = host=db1.internal port=5432 dbname=app pool_size=40
* = host=db2.internal

[pgbouncer]
listen_addr = *
listen_port = 6432
auth_type = hba
auth_hba_file = /etc/pgbouncer/hba.conf
auth_user = pgbouncer_auth
pool_mode = transaction
default_pool_size = 40
max_prepared_statements = 0
server_reset_query_always = 1
user = pgbouncer
%include extra.ini

[users]
reporting = pool_mode=session
"""


def team(tmp_path: Path, text: str = TEAM) -> team_ini.TeamIni:
    (tmp_path / "extra.ini").write_text("track_extra_parameters = IntervalStyle, search_path\n")
    path = tmp_path / "prod.ini"
    path.write_text(text.replace("%include extra.ini", f"%include {tmp_path / 'extra.ini'}"))
    team_ini.load.cache_clear()
    return team_ini.load(str(path))


def settings(text: str, section: str) -> dict[str, str]:
    out: dict[str, str] = {}
    current = ""
    for line in text.splitlines():
        if line.startswith("["):
            current = line.strip("[]")
        elif " = " in line and current == section:
            key, value = line.split(" = ", 1)
            out[key] = value
    return out


def test_every_setting_of_the_team_is_kept(tmp_path: Path) -> None:
    text = render_ini(PoolSettings(), LAYOUT, team=team(tmp_path))
    mine = settings(text, "pgbouncer")
    assert mine["max_prepared_statements"] == "0" and mine["server_reset_query_always"] == "1"
    assert mine["track_extra_parameters"] == "IntervalStyle, search_path"  # from the %include
    assert settings(text, "users") == {"reporting": "pool_mode=session"}


def test_only_what_the_harness_controls_is_overridden_or_dropped(tmp_path: Path) -> None:
    text = render_ini(PoolSettings(), LAYOUT, team=team(tmp_path))
    mine = settings(text, "pgbouncer")
    assert mine["listen_addr"] == "127.0.0.1" and mine["auth_type"] == "md5" and mine["default_pool_size"] == "1"
    assert "auth_hba_file" not in mine and "auth_user" not in mine and "user" not in mine
    assert settings(text, "databases") == {"leakcheck": "host=127.0.0.1 port=5432 dbname=leakcheck"}
    assert text.count("listen_addr") == 1


def test_the_settings_axes_win_over_the_team_ini(tmp_path: Path) -> None:
    text = render_ini(PoolSettings(), LAYOUT, (("max_prepared_statements", "200"),), team(tmp_path))
    assert settings(text, "pgbouncer")["max_prepared_statements"] == "200"
    assert text.count("max_prepared_statements") == 1


def test_every_override_is_listed(tmp_path: Path) -> None:
    lines = team_ini.overrides(team(tmp_path), *header_keys(fleet=True, peering=True))
    assert "listen_addr: '*' overridden (leakcheck listens on 127.0.0.1 only)" in lines
    assert any(line.startswith("auth_user: 'pgbouncer_auth' dropped") for line in lines)
    assert any(line.startswith("[databases]: its 2 entries replaced") for line in lines)
    assert len(lines) == len(HARNESS_KEYS) + 4  # auth_hba_file, auth_user, user, [databases]


def test_the_run_header_of_one_pgbouncer_does_not_list_a_fleets_keys_as_set(tmp_path: Path) -> None:
    lines = team_ini.overrides(team(tmp_path), *header_keys(fleet=False, peering=False))
    assert not any(line.startswith(("so_reuseport", "peer_id")) for line in lines)
    assert len(lines) == len(HARNESS_KEYS) - 2 + 4
    fleet_unpeered = team_ini.overrides(team(tmp_path), *header_keys(fleet=True, peering=False))
    assert any(line.startswith("so_reuseport: set by leakcheck") for line in fleet_unpeered)
    assert not any(line.startswith("peer_id") for line in fleet_unpeered)


def test_a_teams_fleet_keys_never_reach_one_pgbouncer_and_the_header_says_they_are_dropped(tmp_path: Path) -> None:
    mine = load(tmp_path, "[pgbouncer]\nso_reuseport = 1\npeer_id = 7\nunix_socket_mode = 0777\n")
    written = settings(render_ini(PoolSettings(), LAYOUT, team=mine), "pgbouncer")
    assert not {"so_reuseport", "peer_id", "unix_socket_mode"} & set(written)
    lines = team_ini.overrides(mine, *header_keys(fleet=False, peering=False))
    assert "so_reuseport: '1' dropped (a fleet's processes share one port (set in a fleet only))" in lines
    assert any(line.startswith("unix_socket_mode: '0777' dropped") for line in lines)


@pytest.mark.parametrize("text", ["[pgbouncer]\nunix_socket_perms = 0777\n", "[pgbouncer]\n%include {inc}\n"])
def test_a_key_outside_pgbouncers_allow_list_is_refused_with_its_place(tmp_path: Path, text: str) -> None:
    (tmp_path / "inc.ini").write_text("max_client_conn = 9\nunix_socket_perms = 0777\n")
    said = refusal(tmp_path, text.format(inc=tmp_path / "inc.ini"))
    assert "unix_socket_perms" in said and "PgBouncer" in said and "docs/poolers.md" in said
    assert ("inc.ini:2" if "include" in text else "team.ini:2") in said


def test_a_users_entry_that_sets_a_pool_size_is_dropped_and_listed(tmp_path: Path) -> None:
    mine = load(tmp_path, "[users]\nleakcheck_app = pool_mode=session pool_size=5\n"
                          "leakcheck = reserve_pool_size=2\nreporting = pool_mode=session\n")
    assert settings(render_ini(PoolSettings(), LAYOUT, team=mine), "users") == {"reporting": "pool_mode=session"}
    lines = team_ini.overrides(mine, *header_keys(fleet=False, peering=False))
    assert "[users] leakcheck_app: dropped (it sets pool_size, which leakcheck controls: a pool of one)" in lines


@pytest.mark.parametrize("name", ["missing.ini", "."])
def test_an_ini_that_cannot_be_read_is_one_line(tmp_path: Path, name: str) -> None:
    team_ini.load.cache_clear()
    with pytest.raises(UsageError) as caught:
        team_ini.load(str(tmp_path / name))
    assert "--bouncer-ini" in str(caught.value) and "\n" not in str(caught.value)


def test_an_include_loop_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "a.ini").write_text(f"%include {tmp_path / 'a.ini'}\n")
    team_ini.load.cache_clear()
    with pytest.raises(UsageError, match="include loop"):
        team_ini.load(str(tmp_path / "a.ini"))


def load(tmp_path: Path, text: str, name: str = "team.ini") -> team_ini.TeamIni:
    (tmp_path / name).write_text(text)
    team_ini.load.cache_clear()
    return team_ini.load(str(tmp_path / name))


def refusal(tmp_path: Path, text: str) -> str:
    with pytest.raises(UsageError) as caught:
        load(tmp_path, text)
    assert "\n" not in str(caught.value)
    return str(caught.value)


def rendered_back(tmp_path: Path, team: team_ini.TeamIni) -> team_ini.TeamIni:
    """The ini leakcheck writes, read back as PgBouncer reads it."""
    return load(tmp_path, render_ini(PoolSettings(), LAYOUT, team=team), "rendered.ini")


OPEN_DOOR = """\
[pgbouncer] ; production settings
listen_addr = *
unix_socket_dir = /tmp
auth_type = trust
admin_users = postgres
[pgbouncer]
listen_addr = 0.0.0.0
auth_type = trust
max_client_conn = 50
"""


def test_a_header_with_a_comment_is_still_a_header(tmp_path: Path) -> None:
    team = load(tmp_path, "[pgbouncer] ; production settings\nmax_client_conn = 7\n")
    assert team.value("max_client_conn") == "7"
    assert any("is followed by '; production settings'" in line for line in team_ini.overrides(team, {}, {}))


def test_a_header_followed_by_a_setting_sets_it(tmp_path: Path) -> None:
    team = load(tmp_path, "[pgbouncer] max_client_conn = 7\n[users]bob = pool_mode=session\n")
    assert team.value("max_client_conn") == "7" and team.section("users") == (("bob", "pool_mode=session"),)


def test_a_repeated_pgbouncer_header_keeps_only_what_follows_the_last_one(tmp_path: Path) -> None:
    team = load(tmp_path, "[pgbouncer]\nserver_reset_query_always = 1\nauth_user = x\n"
                          "[pgbouncer]\nmax_client_conn = 5\n")
    assert team.value("server_reset_query_always") is None and team.value("max_client_conn") == "5"
    assert team.value("auth_user") == "x"  # no default: a later header leaves it set
    assert any(line.startswith("[pgbouncer] appears 2 times") and "the 1 settings" in line
               for line in team_ini.overrides(team, {}, {}))


def test_the_team_settings_after_a_databases_header_with_a_comment_are_kept(tmp_path: Path) -> None:
    team = load(tmp_path, "[databases] ; ours\napp = host=x\n[pgbouncer]\nmax_prepared_statements = 0\n")
    assert team.value("max_prepared_statements") == "0" and team.section("databases") == (("app", "host=x"),)


def test_a_repeated_users_section_adds_up(tmp_path: Path) -> None:
    team = load(tmp_path, "[pgbouncer]\n[users]\na = pool_mode=session\n[users]\nb = max_user_connections=2\n")
    assert [k for k, _ in team.section("users")] == ["a", "b"]


def test_whatever_the_team_wrote_the_written_ini_has_leakcheck_values(tmp_path: Path) -> None:
    back = rendered_back(tmp_path, load(tmp_path, OPEN_DOOR))
    expected = {"listen_addr": "127.0.0.1", "unix_socket_dir": "", "auth_type": "md5", "admin_users": "leakcheck"}
    assert {key: back.value(key) for key in expected} == expected
    assert not any("appears" in note or "followed" in note for note in back.notes)  # one plain header


def test_the_run_header_lists_what_leakcheck_neutralised(tmp_path: Path) -> None:
    lines = team_ini.overrides(load(tmp_path, OPEN_DOOR), *header_keys(fleet=False, peering=False))
    assert any(line.startswith("[pgbouncer] at ") and "a section header, then a comment" in line for line in lines)
    assert any(line.startswith("[pgbouncer] appears 2 times") for line in lines)
    assert "listen_addr: '0.0.0.0' overridden (leakcheck listens on 127.0.0.1 only)" in lines


def test_a_key_keeps_its_case_as_pgbouncer_compares_keys_exactly(tmp_path: Path) -> None:
    # PgBouncer would refuse Listen_Addr as an unknown parameter; leakcheck refuses it first, by its name.
    said = refusal(tmp_path, "[pgbouncer]\nListen_Addr = *\n")
    assert "Listen_Addr" in said and "keys are case-sensitive" in said


def test_a_comment_sign_after_a_value_is_part_of_the_value(tmp_path: Path) -> None:
    assert load(tmp_path, "[pgbouncer]\nmax_client_conn = 10 ; ten\n").value("max_client_conn") == "10 ; ten"


def test_carriage_returns_and_blanks_around_a_value_are_not_part_of_it(tmp_path: Path) -> None:
    team = load(tmp_path, "[pgbouncer]\r\n  job_name =\t'nightly batch' \r\n")
    assert team.value("job_name") == "'nightly batch'"  # its quotes are its own


@pytest.mark.parametrize(("text", "said"), [
    ("[PgBouncer]\nmax_client_conn = 1\n", "[PgBouncer] at "),
    ("[ pgbouncer ]\n", "no section PgBouncer knows"),
    ("max_client_conn = 1\n[pgbouncer]\n", "before any [section] header"),
    ("[pgbouncer]\nthis is not a setting\n", ":2: expected 'key = value'"),
    ("[pgbouncer\nmax_client_conn = 1\n", ":1: a '[' without its ']'"),
    ("[pgbouncer]\n%include\n", ":2: expected 'key = value'"),
    ("[pgbouncer]\nmax_client_conn = 1\0\n", "NUL byte"),
])
def test_what_pgbouncer_would_refuse_to_load_is_refused_in_one_line(tmp_path: Path, text: str, said: str) -> None:
    assert said in refusal(tmp_path, text)


def test_a_relative_include_is_read_from_the_current_folder_as_pgbouncer_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for folder, clients in (("sub", "3"), ("conf/sub", "4")):  # the folder PgBouncer reads, and the ini's own
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "extra.ini").write_text(f"max_client_conn = {clients}\n")
    monkeypatch.chdir(tmp_path)
    assert load(tmp_path, "[pgbouncer]\n%include sub/extra.ini\n", "conf/team.ini").value("max_client_conn") == "3"


def test_a_header_inside_an_include_holds_for_what_follows_the_include(tmp_path: Path) -> None:
    (tmp_path / "users.ini").write_text("[users]\n")
    team = load(tmp_path, f"[pgbouncer]\n%include {tmp_path / 'users.ini'}\nbob = pool_mode=session\n")
    assert team.section("users") == (("bob", "pool_mode=session"),) and team.value("bob") is None


def test_includes_nest_ten_deep_and_no_deeper(tmp_path: Path) -> None:
    for level in range(12):
        (tmp_path / f"{level}.ini").write_text(f"%include {tmp_path / f'{level + 1}.ini'}\n")
    (tmp_path / "10.ini").write_text("max_client_conn = 10\n")
    assert load(tmp_path, f"[pgbouncer]\n%include {tmp_path / '1.ini'}\n").value("max_client_conn") == "10"
    (tmp_path / "10.ini").write_text(f"%include {tmp_path / '11.ini'}\n")
    assert "nested more than 10 deep" in refusal(tmp_path, f"[pgbouncer]\n%include {tmp_path / '1.ini'}\n")


@pytest.mark.parametrize(("target", "kind"), [("fifo", "a FIFO"), ("/dev/zero", "a character device"),
                                              ("folder", "a folder")])
def test_an_include_of_anything_but_a_regular_file_is_refused_without_reading_it(
    tmp_path: Path, target: str, kind: str
) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "folder").mkdir()
    path = target if target.startswith("/") else str(tmp_path / target)
    said = refusal(tmp_path, f"[pgbouncer]\n%include {path}\n")
    assert f"{path} is {kind}, not a regular file" in said and "%include at " in said


def test_an_ini_with_its_includes_over_one_mib_is_refused(tmp_path: Path) -> None:
    (tmp_path / "big.ini").write_text(("; " + "x" * 1000 + "\n") * 600)
    (tmp_path / "big2.ini").write_text(("; " + "x" * 1000 + "\n") * 600)
    said = refusal(tmp_path, f"[pgbouncer]\n%include {tmp_path / 'big.ini'}\n%include {tmp_path / 'big2.ini'}\n")
    assert "big2.ini makes the ini and its includes larger than 1024 KiB" in said



@pytest.mark.skipif(os.geteuid() != 0, reason="servers run as another user only when leakcheck runs as root")
@pytest.mark.parametrize("secret", ["/etc/shadow", "private.ini"])
def test_an_include_the_server_user_could_not_read_is_refused_before_it_is_read(tmp_path: Path, secret: str) -> None:
    (tmp_path / "private.ini").write_text("max_client_conn = 1\n")
    (tmp_path / "private.ini").chmod(0o600)
    target = secret if secret.startswith("/") else str(tmp_path / secret)
    said = refusal(tmp_path, f"[pgbouncer]\n%include {target}\n")
    assert f"the server user {server_user().name} (PgBouncer runs as it) cannot read {target}," in said


@pytest.mark.skipif(os.geteuid() != 0, reason="servers run as another user only when leakcheck runs as root")
def test_an_ini_the_server_user_could_not_read_is_refused(tmp_path: Path) -> None:
    (tmp_path / "team.ini").write_text("[pgbouncer]\n")
    (tmp_path / "team.ini").chmod(0o600)
    team_ini.load.cache_clear()
    with pytest.raises(UsageError, match="^--bouncer-ini: the server user .* cannot read "):
        team_ini.load(str(tmp_path / "team.ini"))


@pytest.mark.skipif(os.geteuid() != 0, reason="servers run as another user only when leakcheck runs as root")
def test_an_include_swapped_for_a_readable_file_after_it_was_opened_is_refused_not_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The include is a file only root reads when leakcheck opens it; right after, someone puts a
    # readable file in its place. What leakcheck copies must be a file the server user could read.
    secret, decoy = tmp_path / "secret.ini", tmp_path / "decoy.ini"
    secret.write_text("max_client_conn = 4242\n")
    secret.chmod(0o600)
    decoy.write_text("max_client_conn = 1\n")
    real_open = os.open

    def open_then_swap(name: str, *args: int) -> int:
        fd = real_open(name, *args)
        if str(name) == str(secret):
            os.rename(decoy, secret)  # the path now names a readable file; fd is still the private one
        return fd

    monkeypatch.setattr(team_ini.os, "open", open_then_swap)
    said = refusal(tmp_path, f"[pgbouncer]\n%include {secret}\n")
    assert f"{secret}" in said and "4242" not in said


def test_a_byte_order_mark_is_named_as_pgbouncer_refuses_it(tmp_path: Path) -> None:
    # PgBouncer 1.18, 1.24 and 1.26 stop at it: "syntax error in configuration (team.ini:1)".
    said = refusal(tmp_path, "\ufeff[pgbouncer]\nmax_client_conn = 7\n")
    assert "byte order mark" in said and "PgBouncer" in said


@pytest.mark.parametrize("line", [
    "server_check_query = COPY (SELECT 'host all all 127.0.0.1/32 trust') TO 'pg_hba.conf'; SELECT pg_reload_conf()",
    "server_reset_query = DISCARD ALL; ALTER SYSTEM SET listen_addresses = '*'",
])
def test_a_reset_or_check_query_in_a_team_ini_that_is_not_a_session_reset_is_refused(tmp_path: Path,
                                                                                     line: str) -> None:
    # Such a query runs as whichever role a pool logs in as, the run's superuser too.
    (tmp_path / "more.ini").write_text(f"{line}\n")
    said = refusal(tmp_path, f"[pgbouncer]\nserver_check_delay = 0\n%include {tmp_path / 'more.ini'}\n")
    assert f"{line.split(' =')[0]} at {tmp_path / 'more.ini'}:1" in said and "DISCARD ALL, " in said


def test_a_reset_query_of_session_resets_in_a_team_ini_is_kept(tmp_path: Path) -> None:
    team = load(tmp_path, "[pgbouncer]\nserver_reset_query = DISCARD ALL\nserver_check_query = select 1\n")
    assert (team.value("server_reset_query"), team.value("server_check_query")) == ("DISCARD ALL", "select 1")
