"""A team's own pgbouncer.ini: read as written, run with only what the harness must control overridden."""

from pathlib import Path

import pytest

from leakcheck.errors import UsageError
from leakcheck.provision import team_ini
from leakcheck.provision.bouncer_ini import DROPPED_KEYS, HARNESS_KEYS, BouncerLayout, PoolSettings, render_ini

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


def team(tmp_path: Path) -> team_ini.TeamIni:
    (tmp_path / "extra.ini").write_text("track_extra_parameters = IntervalStyle, search_path\nthis is not a setting\n")
    path = tmp_path / "prod.ini"
    path.write_text(TEAM)
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


def test_a_line_that_is_no_setting_is_passed_on_for_pgbouncer_to_judge(tmp_path: Path) -> None:
    assert "this is not a setting" in render_ini(PoolSettings(), LAYOUT, team=team(tmp_path)).splitlines()


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
    lines = team_ini.overrides(team(tmp_path), HARNESS_KEYS, DROPPED_KEYS)
    assert "listen_addr: '*' overridden (leakcheck listens on 127.0.0.1 only)" in lines
    assert any(line.startswith("auth_user: 'pgbouncer_auth' dropped") for line in lines)
    assert any(line.startswith("[databases]: its 2 entries replaced") for line in lines)
    assert len(lines) == len(HARNESS_KEYS) + 4  # auth_hba_file, auth_user, user, [databases]


@pytest.mark.parametrize("name", ["missing.ini", "."])
def test_an_ini_that_cannot_be_read_is_one_line(tmp_path: Path, name: str) -> None:
    team_ini.load.cache_clear()
    with pytest.raises(UsageError) as caught:
        team_ini.load(str(tmp_path / name))
    assert "--bouncer-ini" in str(caught.value) and "\n" not in str(caught.value)


def test_an_include_loop_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "a.ini").write_text("%include a.ini\n")
    team_ini.load.cache_clear()
    with pytest.raises(UsageError, match="include loop"):
        team_ini.load(str(tmp_path / "a.ini"))
