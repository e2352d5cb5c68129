"""Render pgbouncer.ini and its auth file (pure; both backends use this one renderer)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class PoolMode(StrEnum):
    """PgBouncer's pool_mode values used by leakcheck."""

    TRANSACTION = "transaction"
    SESSION = "session"


@dataclass(frozen=True)
class PoolSettings:
    """What a probe asks of the pooler; everything else stays at the version's default."""

    mode: PoolMode = PoolMode.TRANSACTION
    pool_size: int = 1


@dataclass(frozen=True)
class BouncerLayout:
    """Where one PgBouncer listens, logs and finds its server."""

    listen_port: int
    server_host: str
    server_port: int
    dbname: str
    user: str
    auth_file: str
    logfile: str
    pidfile: str
    unix_socket_dir: str = ""
    listen_addr: str = "127.0.0.1"
    #: clients and the admin console need the run's password (md5: a challenge of one hash; SCRAM would
    #: stretch the 192-bit random password 4096 times per connection, protecting nothing)
    auth_type: str = "md5"


def render_ini(settings: PoolSettings, layout: BouncerLayout) -> str:
    """The whole pgbouncer.ini: one database, password auth, the probe's pool settings."""
    if settings.pool_size < 1:
        raise ValueError(f"pool_size must be at least 1, got {settings.pool_size}")
    lines = [
        "[databases]",
        # No user= here: each client's own role logs in to the server (one pool per role).
        f"{layout.dbname} = host={layout.server_host} port={layout.server_port} dbname={layout.dbname}",
        "",
        "[pgbouncer]",
        f"listen_addr = {layout.listen_addr}",
        f"listen_port = {layout.listen_port}",
        f"unix_socket_dir = {layout.unix_socket_dir}",
        f"auth_type = {layout.auth_type}",
        f"auth_file = {layout.auth_file}",
        f"admin_users = {layout.user}",
        f"logfile = {layout.logfile}",
        f"pidfile = {layout.pidfile}",
        f"pool_mode = {settings.mode.value}",
        f"default_pool_size = {settings.pool_size}",
        "min_pool_size = 0",
        "reserve_pool_size = 0",
        "max_client_conn = 100",
        "",
    ]
    return "\n".join(lines)


def render_auth_file(credentials: tuple[tuple[str, str], ...]) -> str:
    """auth_file lines, `"user" "password"`: PgBouncer checks clients with them and logs in to
    PostgreSQL with them (both SCRAM). Keep the file readable by the server user only."""

    def quoted(text: str) -> str:
        return '"' + text.replace('"', '""') + '"'

    return "".join(f"{quoted(user)} {quoted(password)}\n" for user, password in credentials)
