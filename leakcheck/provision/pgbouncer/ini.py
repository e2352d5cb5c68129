"""Render pgbouncer.ini and its auth file (pure; both backends use this one renderer).

The ini is the team's own (`--bouncer-ini`, parsed by team_ini.py) or an empty one, plus the
settings axes of the cell (`--bouncer-set`), with only what the harness must control set by
leakcheck: where it listens, the one database entry pointing at the test server, the pool mode
and size, auth for the run's roles, log/pid/socket paths (settings.py's `HARNESS_KEYS`; its
`DROPPED_KEYS` are left out). Every other setting stays at the team's value, else the version's default.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from leakcheck.model.pool_settings import PoolSettings
from leakcheck.model.target import Setting
from leakcheck.provision.pgbouncer.settings import DROPPED_KEYS, HARNESS_KEYS
from leakcheck.provision.pgbouncer.team_ini import Item, Section, TeamIni, line_of


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
    #: in a fleet (--bouncer-fleet): share listen_port with the fleet's other processes
    so_reuseport: bool = False
    #: with peering: this process's peer_id (from 1) and the others' (peer_id, unix_socket_dir)
    peer_id: int = 0
    peers: tuple[tuple[int, str], ...] = ()


def harness_values(settings: PoolSettings, layout: BouncerLayout) -> dict[str, str]:
    """leakcheck's value of each HARNESS_KEYS key: what the ini says and SHOW CONFIG must show."""
    if settings.pool_size < 1:
        raise ValueError(f"pool_size must be at least 1, got {settings.pool_size}")
    return {
        "listen_addr": layout.listen_addr,
        "listen_port": str(layout.listen_port),
        "unix_socket_dir": layout.unix_socket_dir,
        "auth_type": layout.auth_type,
        "auth_file": layout.auth_file,
        "admin_users": layout.user,
        "logfile": layout.logfile,
        "pidfile": layout.pidfile,
        "pool_mode": settings.mode.value,
        "default_pool_size": str(settings.pool_size),
        "min_pool_size": "0",
        "reserve_pool_size": "0",
    } | ({"so_reuseport": "1"} if layout.so_reuseport else {}) | (
        {"peer_id": str(layout.peer_id)} if layout.peer_id else {})


#: Keys leakcheck leaves unset (DROPPED_KEYS, and what it writes in a fleet only), at the value PgBouncer's
#: SHOW CONFIG gives them unset (1.18, 1.24, 1.26; a version without the key does not show it).
UNSET_SHOWN = {"auth_hba_file": "", "auth_ident_file": "", "auth_user": "", "auth_dbname": "", "auth_ldap_options": "",
               "user": "", "unix_socket_group": "", "unix_socket_mode": "511"}


def unset_values(layout: BouncerLayout) -> dict[str, str]:
    """What SHOW CONFIG must show for the keys leakcheck leaves unset in this PgBouncer (where it shows them)."""
    return UNSET_SHOWN | ({} if layout.so_reuseport else {"so_reuseport": "0"}) | (
        {} if layout.peer_id else {"peer_id": "0"})


def render_ini(
    settings: PoolSettings, layout: BouncerLayout, extra: Sequence[Setting] = (), team: TeamIni | None = None
) -> str:
    """The whole pgbouncer.ini: the team's sections (if any) with the harness's keys, one database,
    password auth, the cell's settings axes and the probe's pool settings. One [pgbouncer] header,
    and no team line can make another (team_ini reads it as PgBouncer does: keys are letters,
    digits and _.-*, values hold no newline)."""
    harness = harness_values(settings, layout)
    axes = [(k, v) for k, v in extra if k != "pool_mode"]  # the mode reaches us as settings.mode
    # every harness key, also those this PgBouncer runs without (a fleet's so_reuseport, peer_id): never the team's
    controlled = set(HARNESS_KEYS) | set(DROPPED_KEYS) | {k for k, _ in axes}
    team_keys: list[Item] = [(k, v) for k, v in (team.section("pgbouncer") if team else ()) if k not in controlled]
    if "max_client_conn" not in {k for k, _ in [*team_keys, *axes]}:
        team_keys.append(("max_client_conn", "100"))
    if settings.ignored_startup:
        team_keys, axes = _ignoring(settings.ignored_startup, team_keys, axes)
    lines = [
        "[databases]",
        # No user= here: each client's own role logs in to the server (one pool per role).
        f"{layout.dbname} = host={connstring_value(layout.server_host)} port={layout.server_port} "
        f"dbname={layout.dbname}",
        "",
        "[pgbouncer]",
        *(line_of(item) for item in [*harness.items(), *team_keys, *axes]),
        "",
    ]
    for section in team.kept_sections() if team else ():
        if not (layout.so_reuseport and section.name == "peers"):  # a fleet's peers are its own processes
            lines += _section(section)
    if layout.peers:
        port = layout.listen_port
        peers = [f"{peer} = host={connstring_value(folder)} port={port}" for peer, folder in layout.peers]
        lines += ["[peers]", *peers, ""]
    return "\n".join(lines)


def connstring_value(value: str) -> str:
    """A value of a [databases] or [peers] connection string as PgBouncer reads it (loader.c
    cstr_get_value: a space ends a plain value; a quoted one doubles its quotes): a Unix socket folder
    under a TMPDIR with a space stays one value."""
    if value and " " not in value and not value.startswith("'"):
        return value
    return "'" + value.replace("'", "''") + "'"


def _ignoring(names: tuple[str, ...], team: list[Item], axes: list[Item]) -> tuple[list[Item], list[Item]]:
    """The keys with `names` added to ignore_startup_parameters (the axis's value, else the team's)."""
    key = "ignore_startup_parameters"
    given = next((v for k, v in reversed([*team, *axes]) if k == key), "")
    have = [n.strip() for n in given.split(",") if n.strip()]
    merged = ", ".join([*have, *(n for n in names if n not in have)])
    return [i for i in team if i[0] != key], [*(i for i in axes if i[0] != key), (key, merged)]


def _section(section: Section) -> list[str]:
    return [f"[{section.name}]", *(line_of(item) for item in section.items), ""]


def render_auth_file(credentials: tuple[tuple[str, str], ...]) -> str:
    """auth_file lines, `"user" "password"`: PgBouncer checks clients with them (md5, see
    BouncerLayout.auth_type) and logs in to PostgreSQL with them where the server asks (SCRAM over TCP,
    in containers; natively PostgreSQL's Unix socket trusts the server user, PgServer.socket_endpoint).
    Keep the file readable by the server user only."""

    def quoted(text: str) -> str:
        return '"' + text.replace('"', '""') + '"'

    return "".join(f"{quoted(user)} {quoted(password)}\n" for user, password in credentials)
