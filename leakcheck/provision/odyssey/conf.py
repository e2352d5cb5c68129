"""Render odyssey.conf (pure): one storage (our PostgreSQL), one rule per role, a console.

Odyssey's syntax: `name value` lines, strings in double quotes, blocks in braces. Seen on 1.5.2: it
refuses to start without `log_format`; a rule (`database "db" { user "role" { ... } }`) needs
`authentication`, `storage` and `pool`. Clients log in with md5 and the run's password; Odyssey logs
in to PostgreSQL with `storage_password` (PostgreSQL asks for SCRAM). `pool_size` is per rule, so
per role, like PgBouncer's pools.

Extra settings (the "settings as matrix axes" feature) are written in Odyssey's syntax where they
belong: a name in RULE_LEVEL goes into every role's rule (the probes' roles), any other name into
the global section. Which names a team may give is TEAM's (config checks them before any server
starts); a name this Odyssey does not know is its own start error ("odyssey.conf:12 unknown
parameter"). An extra setting with the name of one leakcheck writes (the team's `pool`) replaces it.
Each value is one token of Odyssey's, exactly the team's value (`value_of`): no value holds a line
break, a `"` or a trailing backslash.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from leakcheck.model.errors import UsageError
from leakcheck.model.pool_settings import PoolSettings
from leakcheck.model.team_settings import TeamSettings

Setting = tuple[str, str]

#: Settings Odyssey 1.5.2 accepts only inside a rule: each was tried with `odyssey --test` at both
#: levels, and the global section answered "unexpected parameter". (`client_max`, `log_debug` and
#: `log_query` are accepted at both levels: they stay global.)
RULE_LEVEL = frozenset({
    "application_name_add_host", "backend_startup_options", "catchup_checks", "catchup_timeout",
    "client_fwd_error", "client_login_timeout", "maintain_params", "min_pool_size", "options",
    "password_passthrough", "pool", "pool_acquire_fail_fast", "pool_attach_check", "pool_cancel",
    "pool_client_idle_timeout", "pool_discard", "pool_discard_query", "pool_idle_in_transaction_timeout",
    "pool_notice_after_waiting_ms", "pool_pin_on_listen", "pool_reserve_prepared_statement",
    "pool_reset_timeout_ms", "pool_rollback", "pool_routing", "pool_size", "pool_smart_discard",
    "pool_timeout", "pool_ttl", "quantiles", "reserve_session_server_connection",
    "server_drop_on_cached_plan_error", "server_lifetime", "storage_db", "storage_user", "target_session_attrs",
})

_LISTENS = "leakcheck writes where Odyssey listens (127.0.0.1, no Unix socket)"
_AUTH = "leakcheck writes how clients and Odyssey log in (md5 with the run's passwords)"
_FILES = "leakcheck runs Odyssey in the foreground, logging to its own output in the run's folder"
TEAM = TeamSettings("Odyssey", frozenset({
    # a rule's pooling, reset and session state (RULE_LEVEL)
    "pool", "pool_discard", "pool_discard_query", "pool_smart_discard", "pool_reserve_prepared_statement",
    "pool_cancel", "pool_rollback", "pool_reset_timeout_ms", "pool_timeout", "pool_ttl", "pool_client_idle_timeout",
    "pool_idle_in_transaction_timeout", "pool_pin_on_listen", "pool_notice_after_waiting_ms", "pool_attach_check",
    "pool_acquire_fail_fast", "server_lifetime", "server_drop_on_cached_plan_error",
    "reserve_session_server_connection", "client_fwd_error", "application_name_add_host", "maintain_params",
    "catchup_timeout", "catchup_checks", "quantiles", "target_session_attrs", "client_login_timeout",
    # global: threads, buffers, limits, logging
    "workers", "resolvers", "readahead", "nodelay", "keepalive", "keepalive_keep_interval", "keepalive_probes",
    "keepalive_usr_timeout", "cache_coroutine", "coroutine_stack_size", "cache_msg_gc_size", "pipeline",
    "packet_read_size", "packet_write_queue", "client_max", "client_max_routing", "server_max_routing",
    "server_login_retry", "backend_connect_timeout_ms", "sequential_routing", "smart_search_path_enquoting",
    "log_debug", "log_config", "log_session", "log_query",
}), controlled={
    "include": "it loads another file, whose lines (a `listen` block, rules, auth) leakcheck never sees; give "
               "the settings themselves as --pooler-set axes",
    **dict.fromkeys(("listen", "unix_socket_dir", "unix_socket_mode", "bindwith_reuseport", "enable_online_restart",
                     "promhttp_server_port", "log_general_stats_prom", "log_route_stats_prom"), _LISTENS),
    **dict.fromkeys(("authentication", "password", "storage", "storage_db", "storage_user", "storage_password",
                     "password_passthrough", "hba_file", "auth_query", "auth_query_db", "auth_query_user",
                     "auth_common_name", "auth_pam_service", "auth_module", "ldap_endpoint", "ldap_endpoint_name",
                     "external_auth_socket_path", "database", "pool_routing"), _AUTH),
    **dict.fromkeys(("daemonize", "pid_file", "locks_dir", "log_file", "log_format", "log_to_stdout", "log_syslog",
                     "log_stats", "stats_interval", "graceful_shutdown_timeout_ms", "graceful_die_on_errors"), _FILES),
    "pool_size": "leakcheck sets it (a pool of one makes both clients share a server; two for the *_moved probes)",
    "min_pool_size": "leakcheck sets it (no server connection opened ahead of a client)",
}, examples=("pool", "pool_discard", "pool_smart_discard", "pool_reserve_prepared_statement"),
   sql=frozenset({"pool_discard_query"}), quote='"')
"""Odyssey's allow-list: a rule's pooling, reset and session-state settings and its timeouts, and the
global threads, buffers, limits and logging. Not: `include` (a file of any lines), where it listens and
its sockets, how clients and Odyssey log in (and as whom), its pool size, its process and log files."""

#: Global lines leakcheck writes (values in Odyssey's syntax): a log format (required) on stdout, no
#: periodic stats, and no graceful wait when stopped (the run's clients are gone by then).
_GLOBAL: tuple[Setting, ...] = (
    ("daemonize", "no"),
    ("log_format", '"%p %t %l [%i %s] (%c) %m\\n"'),
    ("log_to_stdout", "yes"),
    ("log_stats", "no"),
    ("unix_socket_mode", '"0700"'),
    ("graceful_shutdown_timeout_ms", "0"),
)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
SERVER_STORAGE = "postgres_server"
CONSOLE_DB = "console"


@dataclass(frozen=True)
class OdysseyLayout:
    """Where one Odyssey listens and finds its server; who may log in."""

    listen_port: int
    server_host: str
    server_port: int
    dbname: str
    admin: str  # the console's user (an admin role, console database "console")
    credentials: tuple[tuple[str, str], ...]  # (role, password) for every role
    listen_host: str = "127.0.0.1"


def value_of(value: str) -> str:
    """A value in Odyssey's syntax: integers and yes/no as they are, a value already in double quotes
    as it is (a string of digits: `"0755"`), anything else in double quotes. Odyssey 1.5.2's lexer ends
    a string at the first `"` not after a backslash and keeps every backslash as written (nothing is
    unescaped), so a value holding a `"` or ending in a lone backslash cannot be written as itself: refused."""
    if any(ch in value for ch in "\n\r\0"):
        raise UsageError(f"an Odyssey setting's value may not hold a line break or NUL: {value!r}")
    if re.fullmatch(r"-?[0-9]+", value) or value in ("yes", "no"):
        return value
    if re.fullmatch(r'"(?:[^"\\]|\\.)*"', value):
        return value
    if '"' in value or (len(value) - len(value.rstrip("\\"))) % 2:  # a backslash would take the quote
        raise UsageError(f"an Odyssey setting's value may not hold a double quote or end with a lone backslash: "
                         f"Odyssey keeps both as written, so {value!r} cannot be written as one value; write the "
                         'whole value in Odyssey\'s own double quotes ("...") or without them')
    return f'"{value}"'


def split_extra(extra: tuple[Setting, ...]) -> tuple[tuple[Setting, ...], tuple[Setting, ...]]:
    """(global settings, rule settings) of the user's extra settings, each name checked for syntax only."""
    for name, _value in extra:
        if not _NAME.fullmatch(name):
            raise UsageError(f"{name!r} is not a setting name (letters, digits, '_' and '.')")
    return (tuple(s for s in extra if s[0] not in RULE_LEVEL), tuple(s for s in extra if s[0] in RULE_LEVEL))


def _merged(ours: list[tuple[str, str]], extra: tuple[Setting, ...]) -> list[str]:
    """`name value` lines: ours (already rendered) with the extra settings replacing or following them."""
    given = {name: value_of(value) for name, value in extra}
    lines = [f"{name} {given.pop(name, value)}" for name, value in ours]
    return lines + [f"{name} {value}" for name, value in given.items()]


def render_odyssey_conf(settings: PoolSettings, extra: tuple[Setting, ...], layout: OdysseyLayout) -> str:
    """The whole odyssey.conf: the probe's pool mode and size per role, password auth, a console."""
    if settings.pool_size < 1:
        raise ValueError(f"pool_size must be at least 1, got {settings.pool_size}")
    top, rule = split_extra(extra)
    lines = _merged(list(_GLOBAL), top)
    lines += ["", "listen {", f'\thost "{layout.listen_host}"', f"\tport {layout.listen_port}", "}", ""]
    lines += [f'storage "{SERVER_STORAGE}" {{', '\ttype "remote"', f'\thost {value_of(layout.server_host)}',
              f"\tport {layout.server_port}", "}", 'storage "local" {', '\ttype "local"', "}", ""]
    secrets = dict(layout.credentials)
    lines += [f'database "{CONSOLE_DB}" {{', f"\tuser {value_of(layout.admin)} {{", '\t\tauthentication "md5"',
              f"\t\tpassword {value_of(secrets.get(layout.admin, ''))}", '\t\trole "admin"', '\t\tpool "session"',
              '\t\tstorage "local"', "\t}", "}", ""]
    lines.append(f"database {value_of(layout.dbname)} {{")
    for role, password in layout.credentials:
        ours = [("authentication", '"md5"'), ("password", value_of(password)), ("storage", f'"{SERVER_STORAGE}"'),
                ("storage_password", value_of(password)), ("pool", f'"{settings.mode.value}"'),
                ("pool_size", str(settings.pool_size))]
        lines += [f"\tuser {value_of(role)} {{", *(f"\t\t{line}" for line in _merged(ours, rule)), "\t}"]
    lines += ["}", ""]
    return "\n".join(lines)


def start_error(log: str, config: str) -> str | None:
    """Odyssey's own reason for not starting, on one line, with the config line it names, if it logged one.

    It logs e.g. `14885 2026-12-01T08:02:55Z error (config) none /x/odyssey.conf:40 unknown parameter`,
    counting lines from 0 (seen on 1.5.2: an unknown name on the first line is reported as `:0`)."""
    found = [m for m in (re.search(r"\berror \(([^)]*)\) \S+ (.+)$", line) for line in log.splitlines()) if m]
    if not found:
        return None
    message = found[-1].group(2).strip()
    where = re.match(r"^(\S+?):(\d+) ", message)
    lines = config.splitlines()
    if where and int(where.group(2)) < len(lines):
        message = f"{message} (Odyssey counts lines from 0: `{lines[int(where.group(2))].strip()}`)"
    return message
