"""What a team may set in each pooler: one allow-list per product, checked before any server starts,
and values written so that none can carry a second setting (pure)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from leakcheck.config.config import Config
from leakcheck.model.errors import UsageError
from leakcheck.model.pool_settings import PoolMode, PoolSettings
from leakcheck.model.team_settings import SAFE_SQL
from leakcheck.model.versions import Version
from leakcheck.provision.odyssey import conf as odyssey_conf
from leakcheck.provision.pgbouncer import settings as bouncer_settings
from leakcheck.provision.pgpool import conf as pgpool_conf
from leakcheck.provision.pgpool.conf import PgpoolLayout, render_pgpool_conf


def config(**raw: str) -> Config:
    return Config.from_strings({"leakcheck_pg": "16", **{f"leakcheck_{k}": v for k, v in raw.items()}})


def refused(**raw: str) -> str:
    with pytest.raises(UsageError) as caught:
        config(**raw)
    said = str(caught.value)
    assert "\n" not in said
    return said


@pytest.mark.parametrize("axis", [
    "pgpool:listen_addresses=*", "pgpool:pcp_listen_addresses=*", "pgpool:port=5432", "pgpool:socket_dir=/tmp",
    "pgpool:unix_socket_directories=/tmp", "pgpool:pcp_socket_dir=/tmp", "pgpool:num_init_children=8",
    "pgpool:max_pool=4", "pgpool:enable_pool_hba=off", "pgpool:pool_passwd=/etc/pgpool2/pool_passwd",
    "pgpool:allow_clear_text_frontend_auth=on", "pgpool:backend_hostname0=db.internal",
    "pgpool:failover_command=touch /tmp/x", "pgpool:use_watchdog=on", "pgpool:logging_collector=on",
    "pgpool:process_management_mode=dynamic", "pgpool:memqcache_oiddir=/tmp",
])
def test_a_pgpool_setting_that_would_open_a_door_is_refused_naming_it_and_the_product(axis: str) -> None:
    name = axis.split(":")[1].split("=")[0]
    said = refused(pooler="pgpool:4.3", pooler_set=axis)
    assert f"pgpool-II's {name} is not a setting a team may set" in said
    assert "docs/poolers.md" in said and "reset_query_list" in said  # what a team may set instead


@pytest.mark.parametrize("axis", [
    "odyssey:include=/etc/odyssey/more.conf", "odyssey:unix_socket_dir=/tmp", "odyssey:unix_socket_mode=0777",
    "odyssey:pool_size=5", "odyssey:min_pool_size=1", "odyssey:storage_user=postgres",
    "odyssey:password_passthrough=yes",
    "odyssey:hba_file=/etc/hba", "odyssey:promhttp_server_port=9127", "odyssey:bindwith_reuseport=yes",
    "odyssey:daemonize=yes", "odyssey:log_file=/tmp/odyssey.log", "odyssey:pid_file=/tmp/o.pid",
    "odyssey:no_such_setting=1",
])
def test_an_odyssey_setting_that_would_open_a_door_is_refused_naming_it_and_the_product(axis: str) -> None:
    name = axis.split(":")[1].split("=")[0]
    said = refused(pooler="odyssey:1.5", pooler_set=axis)
    assert f"Odyssey's {name} is not a setting a team may set" in said and "docs/poolers.md" in said


@pytest.mark.parametrize("axis", ["unix_socket_mode=0777", "unix_socket_group=staff", "conffile=/etc/x.ini",
                                  "auth_ldap_options=x", "no_such_setting_anywhere=1"])
def test_a_pgbouncer_axis_outside_its_allow_list_is_refused(axis: str) -> None:
    said = refused(pooler="pgbouncer:1.24", bouncer_set=axis)
    assert axis.split("=")[0] in said and "PgBouncer" in said


def test_the_refusal_says_why_leakcheck_keeps_a_setting_it_controls() -> None:
    said = refused(pooler="pgpool:4.3", pooler_set="pgpool:listen_addresses=*")
    assert "127.0.0.1" in said
    assert "include" in refused(pooler="odyssey:1.5", pooler_set="odyssey:include=/x.conf")


#: Every pooler setting the tests, matrices, docs and README use today: a team keeps setting them.
USED_TODAY = [
    ("odyssey:1.5", "pooler_set", "odyssey:pool=session"),
    ("odyssey:1.5", "pooler_set", "odyssey:pool_discard=yes,no"),
    ("odyssey:1.5", "pooler_set", "odyssey:pool_smart_discard=no"),
    ("odyssey:1.5", "pooler_set", "odyssey:pool_reserve_prepared_statement=no"),
    ("odyssey:1.5", "pooler_set", "odyssey:workers=1"),
    ("pgpool:4.3", "pooler_set", "pgpool:reset_query_list=ABORT"),
    ("pgpool:4.3", "pooler_set", "pgpool:connection_cache=on,off"),
    ("pgpool:4.3", "pooler_set", "pgpool:child_life_time=0"),
    ("pgbouncer:1.24", "pooler_set", "pgbouncer:max_prepared_statements=0,200"),
    ("pgbouncer:1.24", "bouncer_set", "server_reset_query_always=0,1"),
    ("pgbouncer:1.24", "bouncer_set", 'track_extra_parameters="IntervalStyle,search_path"'),
    ("pgbouncer:1.24", "bouncer_set", "pool_mode=statement"),
    ("pgbouncer:1.24", "bouncer_set", 'server_reset_query="DISCARD ALL",""'),
    ("pgbouncer:1.24", "bouncer_set", "ignore_startup_parameters=extra_float_digits"),
]


@pytest.mark.parametrize(("pooler", "key", "axis"), USED_TODAY)
def test_every_setting_used_today_stays_allowed(pooler: str, key: str, axis: str) -> None:
    assert config(pooler=pooler, **{key: axis}).axes


def test_peering_stays_an_axis_of_a_fleet() -> None:
    assert config(bouncer="1.24", bouncer_fleet="2", bouncer_set="peering=yes,no").axes


def test_a_matrix_file_s_settings_meet_the_same_allow_list(tmp_path: Path) -> None:
    (tmp_path / "m.toml").write_text('pg = ["16"]\n[[pooler]]\nkind = "pgpool"\nversions = ["4.3"]\n'
                                     'settings = { listen_addresses = ["*"] }\n')
    with pytest.raises(UsageError, match="pgpool-II's listen_addresses is not a setting a team may set"):
        Config.from_strings({"leakcheck_matrix": str(tmp_path / "m.toml")})


# --- reset and check queries: SQL the pooler runs as whichever role a pool logs in as, the superuser too

#: SQL that would weaken auth or widen what listens, had it run as the run's superuser.
OPENS_A_DOOR = ["COPY (SELECT 'host all all 127.0.0.1/32 trust') TO 'pg_hba.conf'; SELECT pg_reload_conf()",
                "ALTER SYSTEM SET listen_addresses = '*'", "DISCARD ALL; ALTER SYSTEM SET listen_addresses = '*'",
                "DISCARD ALL -- a comment", "SELECT pg_advisory_unlock_all(); SELECT 2"]
#: (flag, pooler, the SQL-valued setting as that flag names it)
SQL_AXES = [("bouncer_set", "pgbouncer:1.24", "server_check_query"),
            ("bouncer_set", "pgbouncer:1.24", "server_reset_query"),
            ("pooler_set", "odyssey:1.5", "odyssey:pool_discard_query"),
            ("pooler_set", "pgpool:4.3", "pgpool:reset_query_list")]


@pytest.mark.parametrize("value", OPENS_A_DOOR)
@pytest.mark.parametrize(("flag", "pooler", "name"), SQL_AXES)
def test_a_reset_or_check_query_that_is_not_a_session_reset_is_refused_as_an_axis(
    flag: str, pooler: str, name: str, value: str
) -> None:
    given = value.replace("'", "") if pooler.startswith("pgpool") else value  # its file refuses a quote anyway
    said = refused(pooler=pooler, **{flag: f"{name}={given}"})
    assert name.split(":")[-1] in said and "DISCARD ALL, " in said and "SELECT pg_advisory_unlock_all()" in said


@pytest.mark.parametrize("value", ["DISCARD ALL", "discard   all;", "ABORT; DISCARD ALL", '""', "SELECT 1",
                                   "SET SESSION AUTHORIZATION DEFAULT; RESET ALL; CLOSE ALL; UNLISTEN *; "
                                   "select PG_ADVISORY_UNLOCK_ALL ( ); DISCARD PLANS; DISCARD SEQUENCES; DISCARD TEMP"])
@pytest.mark.parametrize(("flag", "pooler", "name"), SQL_AXES)
def test_a_reset_or_check_query_of_session_resets_is_taken_as_an_axis(
    flag: str, pooler: str, name: str, value: str
) -> None:
    assert config(pooler=pooler, **{flag: f"{name}={value}"}).axes


def test_an_odyssey_reset_query_in_its_own_double_quotes_is_read_inside_them() -> None:
    assert config(pooler="odyssey:1.5", pooler_set='odyssey:pool_discard_query="DISCARD ALL"').axes
    said = refused(pooler="odyssey:1.5", pooler_set='odyssey:pool_discard_query="SELECT pg_reload_conf()"')
    assert "pool_discard_query" in said


def test_a_matrix_file_s_reset_query_meets_the_same_statements(tmp_path: Path) -> None:
    (tmp_path / "m.toml").write_text('pg = ["16"]\n[[pooler]]\nkind = "pgbouncer"\nversions = ["1.24"]\n'
                                     'settings = { server_check_delay = ["0"], server_check_query = '
                                     '["ALTER SYSTEM SET listen_addresses = \'*\'"] }\n')
    with pytest.raises(UsageError, match="PgBouncer's server_check_query = .* is SQL the pooler runs"):
        Config.from_strings({"leakcheck_matrix": str(tmp_path / "m.toml")})
    (tmp_path / "m.toml").write_text('pg = ["16"]\n[[pooler]]\nkind = "pgbouncer"\nversions = ["1.24"]\n'
                                     'settings = { server_reset_query = ["DISCARD ALL"] }\n')
    assert Config.from_strings({"leakcheck_matrix": str(tmp_path / "m.toml")}).pooler_tables[0].axes


def test_each_products_allow_list_leaves_out_what_leakcheck_writes_itself() -> None:
    # What the renderers write for the harness is never a team's, except the pool mode a team chooses
    # (PgBouncer's pool_mode, Odyssey's pool, pgpool-II's connection_cache).
    layout = PgpoolLayout(version=Version((4, 3)), port=1, run_dir="/r", pool_passwd="/r/p",
                          server_host="127.0.0.1", server_port=2)
    written = render_pgpool_conf(PoolSettings(PoolMode.SESSION, 1), (), layout)
    pgpool_ours = {line.split(" = ")[0] for line in written.splitlines()}
    assert pgpool_ours & pgpool_conf.TEAM.allowed == {"connection_cache"}
    assert set(bouncer_settings.HARNESS_KEYS) & bouncer_settings.TEAM.allowed == {"pool_mode"}
    assert not set(bouncer_settings.DROPPED_KEYS) & bouncer_settings.TEAM.allowed
    odyssey_ours = {line.split()[0] for line in odyssey_conf.render_odyssey_conf(
        PoolSettings(), (), odyssey_conf.OdysseyLayout(1, "127.0.0.1", 2, "leakcheck", "leakcheck", ())
    ).splitlines() if line.strip() and not line.strip().startswith(("}", "{"))}
    assert odyssey_ours & odyssey_conf.TEAM.allowed == {"pool"}


# --- values: none may carry a second setting ------------------------------------------------------

def odyssey_tokens(text: str) -> list[str]:
    """odyssey.conf's tokens as Odyssey 1.5.2's lexer cuts them: a string runs to its closing quote, a
    backslash taking the next character with it (seen: `"a\\" b"` is one string, kept as written)."""
    tokens, at = [], 0
    while at < len(text):
        if text[at].isspace():
            at += 1
        elif text[at] == '"':
            end = at + 1
            while text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            tokens.append(text[at : end + 1])
            at = end + 1
        else:
            match = re.match(r"[^\s\"]+", text[at:])
            assert match is not None
            tokens.append(match.group())
            at += len(match.group())
    return tokens


LAYOUT = odyssey_conf.OdysseyLayout(1, "127.0.0.1", 2, "leakcheck", "leakcheck", (("leakcheck", "pw"),))


@pytest.mark.parametrize("value", ["} listen { host * port 7777 } database x { user y { pool session",
                                   "a\\b c", "a\\\\", "# not a comment", "'single'"])
def test_an_odyssey_value_is_one_token_holding_exactly_the_value(value: str) -> None:
    tokens = odyssey_tokens(odyssey_conf.render_odyssey_conf(PoolSettings(), (("log_debug", value),), LAYOUT))
    assert tokens[tokens.index("log_debug") + 1] == f'"{value}"' and tokens.count("listen") == 1
    assert tokens[tokens.index("listen") + 3] == '"127.0.0.1"'


@pytest.mark.parametrize("value", ['x" } listen { host "*" port 7777 } log_debug "', 'x\\" listen', "x\\", 'a"b'])
def test_an_odyssey_value_that_could_end_its_string_is_refused_before_any_server_starts(value: str) -> None:
    said = refused(pooler="odyssey:1.5", pooler_set=f"odyssey:pool_discard_query={value}")
    assert "--pooler-set=" in said and ("double quote" in said or "backslash" in said)


@pytest.mark.parametrize("value", ["ABORT' listen_addresses = '*", "x\\' listen_addresses = '*", "x''y", "x\\"])
def test_a_pgpool_value_that_could_end_its_string_is_refused_before_any_server_starts(value: str) -> None:
    said = refused(pooler="pgpool:4.3", pooler_set=f"pgpool:reset_query_list={value}")
    assert "single quote" in said and "pgpool-II" in said


@pytest.mark.parametrize("value", ["x\nlisten { host \"*\" }", "x\rlisten", "x\0y"])
def test_a_line_break_or_nul_in_a_value_is_refused_before_any_server_starts(value: str) -> None:
    for pooler, axis in (("odyssey:1.5", "odyssey:log_debug"), ("pgpool:4.3", "pgpool:log_line_prefix"),
                         ("pgbouncer:1.24", "pgbouncer:server_reset_query")):
        refused(pooler=pooler, pooler_set=f"{axis}={value}")


def test_the_docs_list_each_products_settings_as_the_code_does() -> None:
    page = (Path(__file__).parents[2] / "docs" / "poolers.md").read_text(encoding="utf-8")
    section = page.split("## Settings a team may set")[1].split("\n### ")[0]
    for team in (bouncer_settings.TEAM, odyssey_conf.TEAM, pgpool_conf.TEAM):
        item = next(block for block in section.split("\n- ") if block.startswith(f"**{team.product}**"))
        listed = set(re.findall(r"`([a-z0-9_]+)`", re.split(r"A team may\s+set", item)[1]))
        assert listed - {"peering"} == team.allowed, team.product


def test_the_docs_list_the_statements_a_reset_or_check_query_may_hold_as_the_code_does() -> None:
    page = (Path(__file__).parents[2] / "docs" / "poolers.md").read_text(encoding="utf-8")
    section = page.split("### Reset and check queries")[1].split("###")[0]
    assert re.findall(r"`([^`]*)`", section.split("from this list")[1].split("(an Odyssey")[0]) == list(SAFE_SQL)
    named = {name for team in (bouncer_settings.TEAM, odyssey_conf.TEAM, pgpool_conf.TEAM) for name in team.sql}
    assert named == set(re.findall(r"`([a-z_]+_query[a-z_]*)`", section))



@pytest.mark.parametrize("value", ["SELECT pg_advısory_unlock_all()", "ſelect 1", "DISCARD\u00a0ALL", "DISCARD\x1cALL"])
def test_a_reset_query_that_only_looks_safe_outside_ascii_is_refused_in_one_line(value: str) -> None:
    with pytest.raises(UsageError, match="server_reset_query"):
        Config.from_strings({"leakcheck_bouncer": "1.24", "leakcheck_bouncer_set": f"server_reset_query={value}"})
