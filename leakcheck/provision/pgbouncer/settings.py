"""PgBouncer's [pgbouncer] keys by who sets them: leakcheck (HARNESS_KEYS), nobody (DROPPED_KEYS: a
team's value is dropped), or the team (TEAM: its ini, its %include files and --bouncer-set axes).
Every key PgBouncer 1.18, 1.24 and 1.26 show in SHOW CONFIG is in exactly one of the three."""

from __future__ import annotations

from leakcheck.model.team_settings import TeamSettings

#: [pgbouncer] keys leakcheck sets itself, whatever the team's ini or --bouncer-set say (each says why).
HARNESS_KEYS: dict[str, str] = {
    "listen_addr": "leakcheck listens on 127.0.0.1 only",
    "listen_port": "a free port of this run",
    "unix_socket_dir": "no Unix socket outside the run's folder",
    "auth_type": "the run's roles log in with per-run passwords",
    "auth_file": "the run's roles and passwords",
    "admin_users": "the run's superuser resets the pool between probes",
    "logfile": "the run's folder",
    "pidfile": "the run's folder",
    "pool_mode": "transaction for the probes (unless set), session for the control",
    "default_pool_size": "a pool of one makes both clients share a server (two for the *_moved probes)",
    "min_pool_size": "no server connection opened ahead of a client",
    "reserve_pool_size": "no extra server connection",
    "so_reuseport": "a fleet's processes share one port (set in a fleet only)",
    "peer_id": "a fleet's peering (set in a fleet with peering=yes only)",
}
#: Of HARNESS_KEYS, those leakcheck writes in a fleet only (--bouncer-fleet); one PgBouncer runs without them.
FLEET_KEYS = frozenset({"so_reuseport", "peer_id"})
#: [pgbouncer] keys dropped from a team's ini: they would send logins, auth, sockets or the process elsewhere.
DROPPED_KEYS: dict[str, str] = {
    "auth_hba_file": "auth is the run's passwords",
    "auth_ident_file": "auth is the run's passwords",
    "auth_user": "auth is the run's passwords (no auth_query against the test server)",
    "auth_query": "auth is the run's passwords",
    "auth_dbname": "auth is the run's passwords",
    "auth_ldap_options": "auth is the run's passwords",
    "user": "PgBouncer runs as leakcheck's server user",
    "server_tls_sslmode": "the test server speaks no TLS",
    "unix_socket_mode": "no Unix socket but the run's own, in a folder only the server user enters",
    "unix_socket_group": "no Unix socket but the run's own, in a folder only the server user enters",
    "conffile": "PgBouncer runs the ini leakcheck wrote",
}
#: [users] settings leakcheck controls (a pool of one): an entry setting one is dropped from a team's ini.
USER_HARNESS_KEYS = ("pool_size", "reserve_pool_size")

TEAM = TeamSettings("PgBouncer", frozenset({
    # how it pools, resets and tracks session state
    "pool_mode", "max_prepared_statements", "server_reset_query", "server_reset_query_always",
    "track_extra_parameters", "ignore_startup_parameters", "disable_pqexec", "application_name_add_host",
    "server_round_robin", "server_check_query", "server_check_delay", "server_fast_close",
    # limits
    "max_client_conn", "max_db_connections", "max_user_connections", "max_db_client_connections",
    "max_user_client_connections", "max_packet_size", "pkt_buf", "sbuf_loopcnt", "listen_backlog",
    "tcp_socket_buffer", "tcp_defer_accept", "tcp_keepalive", "tcp_keepcnt", "tcp_keepidle", "tcp_keepintvl",
    "tcp_user_timeout",
    # timeouts
    "server_lifetime", "server_idle_timeout", "server_connect_timeout", "server_login_retry",
    "client_login_timeout", "client_idle_timeout", "idle_transaction_timeout", "transaction_timeout",
    "query_timeout", "query_wait_timeout", "query_wait_notify", "cancel_wait_timeout", "suspend_timeout",
    "autodb_idle_timeout", "reserve_pool_timeout", "pool_idle_timeout",
    "dns_max_ttl", "dns_nxdomain_ttl", "dns_zone_check_period", "resolv_conf",
    # TLS (the files are opened by PgBouncer itself, as the server user; the test server speaks no TLS)
    "client_tls_sslmode", "client_tls_key_file", "client_tls_cert_file", "client_tls_ca_file",
    "client_tls_protocols", "client_tls_ciphers", "client_tls13_ciphers", "client_tls_ecdhcurve",
    "client_tls_dheparams", "server_tls_ca_file", "server_tls_cert_file", "server_tls_key_file",
    "server_tls_protocols", "server_tls_ciphers", "server_tls13_ciphers", "scram_iterations",
    # logging and statistics
    "log_connections", "log_disconnections", "log_pooler_errors", "log_stats", "stats_period", "stats_users",
    "verbose", "syslog", "syslog_ident", "syslog_facility", "job_name", "login_notify_message",
}), controlled={
    **{key: f"leakcheck sets {key} itself ({why})" for key, why in HARNESS_KEYS.items()},
    **{key: f"leakcheck drops {key} from a team's ini ({why})" for key, why in DROPPED_KEYS.items()},
}, examples=("pool_mode", "max_prepared_statements", "server_reset_query", "track_extra_parameters"),
   sql=frozenset({"server_reset_query", "server_check_query"}))
"""PgBouncer's allow-list: how it pools, resets and tracks state, its limits, timeouts, TLS and logging.
Not: where it listens, its sockets, files and process user (HARNESS_KEYS, DROPPED_KEYS), who logs in
and how (auth_*), its pool sizes, and `conffile`. A key a later PgBouncer adds is refused until it is
added here (after reading what it does)."""


def header_keys(fleet: bool, peering: bool) -> tuple[dict[str, str], dict[str, str]]:
    """(what leakcheck sets, what it drops) in the PgBouncers of a run, for the run header: a fleet's
    keys are set in a fleet only (peer_id with peering=yes only); elsewhere a team's value is dropped."""
    unwritten = set(FLEET_KEYS) if not fleet else ({"peer_id"} if not peering else set())
    harness = {key: why for key, why in HARNESS_KEYS.items() if key not in unwritten}
    return harness, DROPPED_KEYS | {key: HARNESS_KEYS[key] for key in sorted(unwritten)}
