"""Which probes measure each session effect, and what to do about it: data, beside the classes of classify.py.

`probes_for(effect)` names probe ids of leakcheck/probes (tests/pure/test_scan_classify.py checks that
every id here exists and that every kind has an entry). A kind with no probe (LOAD; COPY outside a
transaction) is listed by scan as "no probe measures it": a class no measurement covers never passes as
isolated, and never fails a gate either.

SET and set_config map by parameter: the parameters a probe is about (`PARAMETERS`), a custom setting
(a name with a dot: `CUSTOM`), and any other (`OTHER`: a setting left for the next client). The names of
protocol-level prepared statements say which driver prepared them (`DRIVER_NAMES`: prefixes as each
driver names its statements), a hint the report shows beside the statements.
"""

from __future__ import annotations

from leakcheck.scan.classify import Effect, Kind

#: SET / set_config(..., false) of these parameters: the probes about them.
PARAMETERS: dict[str, tuple[str, ...]] = {
    "statement_timeout": ("statement_timeout",),
    "search_path": ("search_path",),
    "timezone": ("timezone", "timezone_moved"),
    "datestyle": ("datestyle",),
    "intervalstyle": ("intervalstyle",),
    "application_name": ("application_name", "application_name_empty"),
    "lock_timeout": ("lock_timeout",),
    "idle_in_transaction_session_timeout": ("idle_in_transaction_timeout",),
    "client_encoding": ("client_encoding",),
    "session_replication_role": ("replication_role",),
    "default_transaction_read_only": ("read_only",),
    "temp_buffers": ("temp_buffers_blocked",),
}
#: A custom setting (`app.tenant`): kept, moved, only reset, and the row-level security that reads it.
CUSTOM: tuple[str, ...] = ("custom_setting", "custom_setting_moved", "custom_setting_placeholder", "rls_tenant")
#: Any other parameter: a setting the previous client left.
OTHER: tuple[str, ...] = ("handover_setting",)
#: SET LOCAL / set_config(..., true): measured isolated where the pooler keeps a transaction on one server.
LOCAL: tuple[str, ...] = ("set_local",)
LOCAL_CUSTOM: tuple[str, ...] = ("set_local", "rls_tenant_local")

#: Each kind's probes (SET and set_config kinds map by parameter instead) and what to do about it.
KINDS: dict[Kind, tuple[tuple[str, ...], str]] = {
    Kind.SET: ((), "A session `SET` outlives the transaction on a pooled server connection: the next client "
               "gets it, and this client may lose it. Set it per transaction (`SET LOCAL` inside `BEGIN ... "
               "COMMIT`, or `set_config(name, value, true)`), per role (`ALTER ROLE app SET ...`), or at connect "
               "time for the parameters the pooler tracks."),
    Kind.SET_LOCAL: ((), "Transaction-scoped: it ends with its transaction, the pooler-safe form of `SET`."),
    Kind.SET_CONFIG: ((), "`set_config(name, value, false)` is a session `SET`: pass `true` (is_local) inside a "
                      "transaction so it ends with it, as `SET LOCAL` does."),
    Kind.SET_CONFIG_LOCAL: ((), "Transaction-scoped (`is_local = true`): it ends with its transaction."),
    Kind.SET_CONFIG_UNKNOWN: (("custom_setting", "rls_tenant", "rls_tenant_local"),
                              "The text does not show set_config's parameter or is_local (a pg_stat_statements "
                              "export shows `$n`): check the code; with `false` it is a session `SET`, with `true` "
                              "it ends with its transaction."),
    Kind.RESET: (("custom_setting_placeholder",),
                 "`RESET` on a shared server connection resets what the previous client left, not what this "
                 "client set elsewhere; a custom setting RESET stays as an empty placeholder another client sees. "
                 "Set values per transaction instead of resetting them."),
    Kind.SET_ROLE: (("set_role", "set_role_privileged", "handover_role"),
                    "A session `SET ROLE` reaches the next client on that server connection with this role's "
                    "privileges: use `SET LOCAL ROLE` inside the transaction, or log in as that role."),
    Kind.SESSION_AUTHORIZATION: (("session_authorization",),
                                 "`SET SESSION AUTHORIZATION` changes who the server connection is for every later "
                                 "client: never on a pooled connection; log in as that user."),
    Kind.SESSION_CHARACTERISTICS: (("read_only",),
                                   "Session characteristics apply to every later transaction on the server "
                                   "connection, other clients' too: use `BEGIN READ ONLY` / `SET TRANSACTION` per "
                                   "transaction, or `ALTER ROLE ... SET default_transaction_read_only`."),
    Kind.DISCARD: (("cleanup_discard_all",),
                   "`DISCARD` from one client (a pool's reset query) drops what another client keeps on the shared "
                   "server connection (its prepared statements, temp tables): leave resets to the pooler "
                   "(`server_reset_query`), which runs them when no client holds the connection."),
    Kind.DEALLOCATE_ALL: (("cleanup_deallocate_all",),
                          "`DEALLOCATE ALL` (Prisma's `pgbouncer=true` sends it) reaches the prepared statements "
                          "of whichever client shares the server connection: with PgBouncer 1.21+ statement "
                          "tracking (`max_prepared_statements`), drop the workaround."),
    Kind.DEALLOCATE: (("cleanup_deallocate_named",),
                      "`DEALLOCATE name` on a shared server connection can remove another client's statement of "
                      "that name: prepare and deallocate within one transaction, or use protocol-level statements "
                      "with the pooler's tracking."),
    Kind.PREPARE: (("sql_prepare", "handover_prepare", "prepared_disclosure"),
                   "SQL `PREPARE` lives on the server connection: another client may find it (and its text), or "
                   "take its name, and this client may lose it. Prepare and deallocate within one transaction, or "
                   "use the driver's protocol-level statements with the pooler's tracking."),
    Kind.EXECUTE: (("sql_prepare",), "SQL `EXECUTE` of a statement another transaction prepared finds whichever "
                   "server connection it gets: prepare in the same transaction."),
    Kind.PROTOCOL_PREPARE: (("protocol_prepare", "protocol_prepare_moved", "prepared_disclosure"),
                            "Named protocol-level prepared statements break or leak through PgBouncer without "
                            "statement tracking (before 1.21, or `max_prepared_statements = 0`): turn tracking on "
                            "(the default from 1.24), or switch the driver's server-side prepare off (pgjdbc "
                            "`prepareThreshold=0`, asyncpg `statement_cache_size=0`, psycopg "
                            "`prepare_threshold=None`)."),
    Kind.LISTEN: (("listen_notify", "handover_listen"),
                  "`LISTEN` subscribes the server connection, not the client: notifications go to whoever holds it "
                  "next, and this client misses its own. Listen on a direct connection or a session pool."),
    Kind.UNLISTEN: (("listen_notify",), "`UNLISTEN` on a shared server connection ends another client's "
                    "subscription: listen on a direct connection or a session pool."),
    Kind.ADVISORY_LOCK: (("advisory_lock", "handover_advisory_lock"),
                         "A session advisory lock stays with the server connection after the transaction: the next "
                         "client holds it unknowingly and its unlock may run elsewhere (migration tools deadlocking "
                         "every pod). Use `pg_advisory_xact_lock` inside a transaction, or take it on a direct "
                         "connection."),
    Kind.ADVISORY_UNLOCK: (("advisory_lock",),
                           "The unlock of a session advisory lock may reach another server connection than the "
                           "lock: use `pg_advisory_xact_lock`, released by COMMIT."),
    Kind.ADVISORY_XACT_LOCK: (("advisory_xact_lock",), "Transaction-scoped: released by COMMIT or ROLLBACK."),
    Kind.TEMP_TABLE: (("temp_table", "handover_temp_table", "temp_shadow", "temp_buffers_blocked"),
                      "A temporary table stays on the server connection: the next client sees it (and its "
                      "unqualified names may resolve to it), and this client may not find it. Create it inside the "
                      "transaction with `ON COMMIT DROP`."),
    Kind.TEMP_TABLE_ON_COMMIT_DROP: (("temp_table_on_commit_drop",), "Transaction-scoped: dropped at COMMIT."),
    Kind.TEMP_OBJECT: (("temp_table", "temp_shadow"),
                       "A temporary view or sequence stays on the server connection as a temporary table does: "
                       "create and use it within one transaction, or use a permanent one."),
    Kind.CURSOR_WITH_HOLD: (("with_hold_cursor",),
                            "A `WITH HOLD` cursor outlives its transaction on the server connection: the next "
                            "client may fetch from it, and this client may not find it (Django's server-side "
                            "cursors outside a transaction are such cursors: `DISABLE_SERVER_SIDE_CURSORS = True`)."),
    Kind.CURSOR: (("plain_cursor",), "Transaction-scoped: a cursor without HOLD ends with its transaction."),
    Kind.SEQUENCE_STATE: (("lastval",),
                          "`currval` / `lastval` read the session's last `nextval`: behind a pooler it may be "
                          "another client's value. Use `INSERT ... RETURNING` or `nextval`'s own result."),
    Kind.LOAD: ((), "`LOAD` puts a library into the server process for the rest of its life: every later client "
                "of that server connection has it. Load it per role or database (`session_preload_libraries`)."),
    Kind.COPY_OUTSIDE_TRANSACTION: ((), "COPY on the copy protocol outside a transaction block: no leakcheck probe "
                                    "measures it yet; it is listed so that you know the workload does it."),
    Kind.COPY_TRANSACTION_UNKNOWN: ((), "COPY on the copy protocol: this input does not tell whether it ran inside a "
                                    "transaction block (a log with the session in its prefix does); no leakcheck "
                                    "probe measures it yet."),
}

#: How drivers name their protocol-level prepared statements: (name prefix, driver id as --drivers takes it).
DRIVER_NAMES: tuple[tuple[str, str], ...] = (
    ("S_", "pgjdbc"),
    ("lrupsc_", "pgx"),
    ("stmtcache_", "pgx-v5"),
    ("__asyncpg_stmt_", "asyncpg"),
    ("_pg3_", "psycopg"),
    ("pdo_stmt_", "pdo"),
)


def driver_of(name: str) -> str:
    """The driver whose naming a prepared statement's name follows ("" when none is known): Rails' `a1`,
    `a2` are ruby-pg's (ActiveRecord)."""
    for prefix, driver in DRIVER_NAMES:
        if name.startswith(prefix):
            return driver
    if len(name) > 1 and name[0] == "a" and name[1:].isdigit():
        return "ruby-pg"
    return ""


_SETS = (Kind.SET, Kind.SET_CONFIG)
_LOCALS = (Kind.SET_LOCAL, Kind.SET_CONFIG_LOCAL)


def probes_for(effect: Effect) -> tuple[str, ...]:
    """The probe ids that measure this effect (empty: none does)."""
    custom = "." in effect.detail
    if effect.kind in _SETS or (effect.kind is Kind.SET_CONFIG_UNKNOWN and effect.detail != "?"):
        return PARAMETERS.get(effect.detail) or (CUSTOM if custom else OTHER)
    if effect.kind in _LOCALS:
        return LOCAL_CUSTOM if custom else LOCAL
    if effect.kind is Kind.RESET and not custom:
        return ()
    return KINDS[effect.kind][0]


def advice_for(effect: Effect) -> str:
    """What to do about the effect itself (the measured verdicts add their own advice per cell)."""
    return KINDS[effect.kind][1]
