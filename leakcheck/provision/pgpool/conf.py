"""Render pgpool.conf, pool_passwd, pool_hba.conf and pcp.conf for pgpool-II (pure).

One backend (our PostgreSQL) in `raw` mode: no replication, no load balancing, no failover on a
backend error, no health or replication checks. Clients log in with md5 (pool_hba.conf) against
pool_passwd, which holds each role's password as `TEXT` so pgpool-II can log in to PostgreSQL with
SCRAM. pgpool-II has no transaction pooling: each of its `num_init_children` child processes serves
one client session at a time and keeps (`connection_cache`) up to `max_pool` backends, one per
(user, database), for the next session it serves; `reset_query_list` (left at the version's
default) runs when a client disconnects. So leakcheck's pool size is the number of child processes
(with one backend each): a pool of one serves one session at a time, always on the same backend.

Names that changed: `socket_dir` became `unix_socket_directories` in 4.4, `logdir` became `work_dir`
in 4.7 (release notes). Extra settings (a team may give TEAM's names; config checks them before any
server starts) are written as `name = value` after leakcheck's own (the team's connection_cache
replaces ours), each value one quoted string, exactly the team's (`value_of`). pgpool-II ignores
names it does not know, so the process asks it about each extra name once it runs (PgpoolProcess),
and its own answer is the error.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from leakcheck.model.errors import UsageError
from leakcheck.model.pool_settings import PoolMode, PoolSettings
from leakcheck.model.team_settings import TeamSettings
from leakcheck.model.versions import Version

Setting = tuple[str, str]
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
PCP_PORT = 9898  # its Unix socket lives in the run's own folder; TCP is off


_LISTENS = "leakcheck writes where pgpool-II listens (127.0.0.1 and sockets in the run's folder; PCP on a socket only)"
_AUTH = "leakcheck writes how clients log in (pool_hba.conf, md5 against the run's pool_passwd)"
_POOL = "leakcheck sets pgpool-II's pool (num_init_children children of one backend each: the probe's pool size)"
_BACKEND = "leakcheck writes pgpool-II's one backend, the run's PostgreSQL, with failover and checks off"
_FILES = "leakcheck keeps pgpool-II's files in the run's folder and its log on its own output"
TEAM = TeamSettings("pgpool-II", frozenset({
    # what a child keeps and resets between client sessions
    "connection_cache", "reset_query_list", "child_life_time", "child_max_connections", "connection_life_time",
    "client_idle_limit", "serialize_accept", "listen_backlog_multiplier", "reserved_connections",
    "authentication_timeout",
    # how it reads queries
    "ignore_leading_white_space", "allow_sql_comments", "check_temp_table", "check_unlogged_table",
    "enable_shared_relcache", "relcache_expire", "relcache_size", "relcache_query_target",
    # logging
    "log_statement", "log_per_node_statement", "log_client_messages", "log_connections", "log_disconnections",
    "log_hostname", "log_error_verbosity", "client_min_messages", "log_min_messages", "log_line_prefix",
}), controlled={
    **dict.fromkeys(("listen_addresses", "port", "socket_dir", "unix_socket_directories", "unix_socket_group",
                     "unix_socket_permissions", "pcp_listen_addresses", "pcp_port", "pcp_socket_dir",
                     "wd_ipc_socket_dir", "use_watchdog", "wd_port0", "heartbeat_port0", "pgpool_port0",
                     "hostname0", "heartbeat_hostname0", "trusted_servers", "delegate_ip", "memqcache_method",
                     "memqcache_memcached_host", "memqcache_memcached_port"), _LISTENS),
    **dict.fromkeys(("enable_pool_hba", "pool_passwd", "allow_clear_text_frontend_auth", "ssl", "ssl_key",
                     "ssl_cert", "ssl_ca_cert", "ssl_ca_cert_dir", "ssl_crl_file", "ssl_passphrase_command",
                     "health_check_user", "health_check_password", "sr_check_user", "sr_check_password",
                     "recovery_user", "recovery_password", "wd_authkey"), _AUTH),
    **dict.fromkeys(("num_init_children", "max_pool", "process_management_mode", "min_spare_children",
                     "max_spare_children", "load_balance_mode", "memory_cache_enabled"), _POOL),
    **dict.fromkeys(("backend_clustering_mode", "backend_hostname0", "backend_port0", "backend_flag0",
                     "backend_weight0", "backend_data_directory0", "backend_application_name0",
                     "failover_on_backend_error", "failover_command", "failback_command", "follow_primary_command",
                     "recovery_1st_stage_command", "recovery_2nd_stage_command", "health_check_period",
                     "sr_check_period", "auto_failback"), _BACKEND),
    **dict.fromkeys(("pid_file_name", "logdir", "work_dir", "log_destination", "logging_collector", "log_directory",
                     "log_filename", "memqcache_oiddir", "if_up_cmd", "if_down_cmd", "arping_cmd",
                     "wd_escalation_command", "wd_de_escalation_command"), _FILES),
}, examples=("connection_cache", "reset_query_list", "child_life_time", "client_idle_limit"),
   sql=frozenset({"reset_query_list"}))
"""pgpool-II's allow-list: what a child caches and resets between sessions, its session limits and
timeouts, how it reads queries, and its logging. Not: where it listens (its port, sockets, PCP,
watchdog and memcached), how clients log in (hba, pool_passwd, TLS), its children and backends (the
pool size, load balancing, failover, checks and their commands), its files and log destination."""


@dataclass(frozen=True)
class PgpoolLayout:
    """Where one pgpool-II listens, keeps its sockets, pid and status files, and finds its server."""

    version: Version
    port: int
    run_dir: str  # Unix sockets (clients and PCP), pid file, pgpool_status
    pool_passwd: str  # its path
    server_host: str
    server_port: int
    listen_addresses: str = "127.0.0.1"
    clients: str = "127.0.0.1/32"  # the address range pool_hba.conf lets in (with a password)


def value_of(value: str) -> str:
    """A value in pgpool.conf's syntax: an integer as it is, anything else single-quoted. pgpool-II's
    lexer (4.3-4.7) ends a string at the first `'` not after a backslash, keeps every backslash as
    written and takes no `''`, so a value holding a `'` or ending in a lone backslash cannot be written as
    itself: refused (a `''` stopped pgpool-II with a syntax error)."""
    if any(ch in value for ch in "\n\r\0"):
        raise UsageError(f"a pgpool-II setting's value may not hold a line break or NUL: {value!r}")
    if re.fullmatch(r"-?[0-9]+", value):
        return value
    if "'" in value or (len(value) - len(value.rstrip("\\"))) % 2:  # a backslash would take the quote
        raise UsageError(f"a pgpool-II setting's value may not hold a single quote or end with a lone backslash: "
                         f"pgpool-II keeps backslashes as written and reads no quote inside a value, so {value!r} "
                         "cannot be written as one value")
    return f"'{value}'"


def _ours(settings: PoolSettings, layout: PgpoolLayout) -> list[Setting]:
    sockets = "unix_socket_directories" if layout.version >= Version((4, 4)) else "socket_dir"
    work = "work_dir" if layout.version >= Version((4, 7)) else "logdir"
    return [
        ("backend_clustering_mode", "raw"),
        ("listen_addresses", layout.listen_addresses),
        ("port", str(layout.port)),
        (sockets, layout.run_dir),
        ("pcp_listen_addresses", ""),
        ("pcp_port", str(PCP_PORT)),
        ("pcp_socket_dir", layout.run_dir),
        ("wd_ipc_socket_dir", layout.run_dir),
        ("pid_file_name", f"{layout.run_dir}/pgpool.pid"),
        (work, layout.run_dir),
        ("backend_hostname0", layout.server_host),
        ("backend_port0", str(layout.server_port)),
        ("backend_flag0", "DISALLOW_TO_FAILOVER"),
        ("failover_on_backend_error", "off"),
        ("health_check_period", "0"),
        ("sr_check_period", "0"),
        ("load_balance_mode", "off"),
        ("enable_pool_hba", "on"),
        ("pool_passwd", layout.pool_passwd),
        ("connection_cache", "on"),
        ("num_init_children", str(settings.pool_size)),
        ("max_pool", "1"),
    ]


#: Of leakcheck's settings, those PGPOOL SHOW does not answer as written (4.3-4.7 show '*****').
_NOT_SHOWN = frozenset({"pool_passwd"})


def shown(settings: PoolSettings, extra: tuple[Setting, ...], layout: PgpoolLayout) -> dict[str, str]:
    """What `PGPOOL SHOW name` must answer for each setting leakcheck writes and a team may not set (the
    team's connection_cache is the team's): where it listens, its sockets and files, its login, its pool
    and its backend."""
    given = {name for name, _ in extra if name in TEAM.allowed}
    return {name: value for name, value in _ours(settings, layout) if name not in given | _NOT_SHOWN}


def render_pgpool_conf(settings: PoolSettings, extra: tuple[Setting, ...], layout: PgpoolLayout) -> str:
    """The whole pgpool.conf: one backend, password auth, pool size = child processes of one backend each."""
    if settings.pool_size < 1:
        raise ValueError(f"pool_size must be at least 1, got {settings.pool_size}")
    if settings.mode is not PoolMode.SESSION:
        raise ValueError(
            f"pgpool-II has no {settings.mode.value} pooling: it keeps a backend per child process between "
            "client sessions; ask for PoolMode.SESSION"
        )
    for name, _value in extra:
        if not _NAME.fullmatch(name):
            raise UsageError(f"{name!r} is not a setting name (letters, digits and '_')")
    given = {name: value_of(value) for name, value in extra}
    lines = [f"{name} = {given.pop(name, value_of(value))}" for name, value in _ours(settings, layout)]
    lines += [f"{name} = {value}" for name, value in given.items()]
    return "\n".join(lines) + "\n"


def render_pool_passwd(credentials: tuple[tuple[str, str], ...]) -> str:
    """`role:TEXTpassword` lines (keep the file private to the server user)."""
    for role, password in credentials:
        if any(ch in role + password for ch in ":\n\r\0"):
            raise ValueError(f"pool_passwd cannot hold the role or password of {role!r} (':' or a line break)")
    return "".join(f"{role}:TEXT{password}\n" for role, password in credentials)


def render_pool_hba(layout: PgpoolLayout) -> str:
    """Every role, every database, with its password (md5), over TCP from `layout.clients` and the socket."""
    return f"local all all md5\nhost all all {layout.clients} md5\n"


def render_pcp_conf(user: str, password: str) -> str:
    """PCP's one user, `user:md5(password)` (PCP listens on a Unix socket in the run's folder only)."""
    return f"{user}:{hashlib.md5(password.encode()).hexdigest()}\n"


def render_files(
    settings: PoolSettings, extra: tuple[Setting, ...], layout: PgpoolLayout,
    credentials: tuple[tuple[str, str], ...], admin: tuple[str, str],
) -> dict[str, str]:
    """Every file pgpool-II is started with, by name: pgpool.conf, pool_passwd, pool_hba.conf, pcp.conf
    (PCP's one user is `admin`, a (user, password) pair)."""
    return {
        "pgpool.conf": render_pgpool_conf(settings, extra, layout),
        "pool_passwd": render_pool_passwd(credentials),
        "pool_hba.conf": render_pool_hba(layout),
        "pcp.conf": render_pcp_conf(*admin),
    }


def start_error(log: str) -> str | None:
    """pgpool-II's own reason for not starting (its last FATAL or ERROR line), on one line, if it logged one.

    It logs e.g. `2026-12-01 08:02:50.821: main pid 14842: FATAL:  invalid value for parameter ...`."""
    found = [m for m in (re.search(r"\b(?:FATAL|ERROR):\s+(.+)$", line) for line in log.splitlines()) if m]
    return " ".join(found[-1].group(1).split()) if found else None


def bind_failure(log: str) -> str | None:
    """pgpool-II 4.4+ goes on running when it cannot listen on its TCP port (a WARNING, then
    `DETAIL:  bind on socket failed with error "Address already in use"`): that line, if it logged it."""
    found = re.search(r'DETAIL:\s+(bind on socket failed with error "[^"]*")', log)
    return f"it could not listen on its port: {found.group(1)}" if found else None
