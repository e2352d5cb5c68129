"""Each probe's own advice for leaks, lost and breaks, fitted to the cell (see advice.py).

A rule returns None for a verdict it has nothing specific for: the generic line is used then.
"""

from __future__ import annotations

from collections.abc import Callable

from leakcheck.model.verdicts import Fact, Outcome, Verdict
from leakcheck.reports.cell import AdviceCell, driver_off, reset_tail

Rule = Callable[[Outcome, AdviceCell], str | None]


def _per_transaction(name: str, local: str) -> Rule:
    """A plain session setting: SET LOCAL (or a per-role default) instead of SET."""
    def rule(o: Outcome, c: AdviceCell) -> str | None:
        if o.verdict is Verdict.LEAKS:
            return (f"Set {name} per transaction (`{local}` inside `BEGIN ... COMMIT`) or per role "
                    f"(`ALTER ROLE app SET {name} = ...`) instead of a session `SET`: poolers cannot re-apply it "
                    f"(the server never reports it).{reset_tail(c)}")
        return None
    return rule


def _tracked(name: str, since: tuple[int, ...] = (), how: str = "") -> Rule:
    """A parameter PgBouncer re-applies per client (some only from a release on)."""
    def rule(o: Outcome, c: AdviceCell) -> str | None:
        options = ", which PgBouncer accepts for tracked settings from 1.20" if c.is_bouncer else ""
        connect = (f"give {name} at connect time (a connection parameter, or `options=-c {name}=...`{options}), "
                   f"per role (`ALTER ROLE app SET {name} = ...`), or with `SET LOCAL {name}` per transaction")
        if since and c.bouncer_before(*since):
            return (f"{c.named} does not re-apply {name} ({how}, since {'.'.join(map(str, since))}): upgrade, "
                    f"or {connect}.")
        if c.is_bouncer and o.verdict is Verdict.LEAKS:
            return (f"PgBouncer tracks {name} per client by default: check that {c.ini} does not narrow its "
                    f"tracked parameters (`track_extra_parameters`); meanwhile {connect}.")
        if c.advice.tracked_params:
            return f"{c.advice.tracked_params}; meanwhile {connect}."
        return f"Do not `SET {name}` on a pooled connection: {connect}."
    return rule


def search_path(o: Outcome, c: AdviceCell) -> str:
    text = ("Schema-qualify names (`app.orders`) or give the role its path (`ALTER ROLE app SET search_path = "
            "...`) instead of `SET search_path` on a pooled connection.")
    if c.is_bouncer:
        if c.pg.parts < (18,):
            text += (f" PostgreSQL {c.pg.prefix(1)} does not report search_path to poolers (18 does, and PgBouncer "
                     "1.26+ re-applies it there: measure that cell); `track_extra_parameters = search_path` (1.20+) "
                     "covers only a path given at connect time.")
        elif c.bouncer_before(1, 26):
            text += (" With PostgreSQL 18, PgBouncer 1.26+ re-applies a reported search_path (measure it before "
                     "relying on it); on 1.20+ so does `track_extra_parameters = search_path`, but together with "
                     "`auth_user` that was CVE-2025-12819, fixed in 1.25.1.")
            if c.bouncer_before(1, 20):
                text += f" {c.named} has neither: upgrade."
        else:
            text += f" {c.named} re-applies reported parameters: check `track_extra_parameters` in {c.ini}."
    if Fact.MISREPORTED in o.facts:
        text += (f" The {c.driver.value} driver was also told a path the server did not have: do not trust its "
                 "ParameterStatus cache.")
    return text


def _application_name(empty: bool) -> Rule:
    def rule(o: Outcome, c: AdviceCell) -> str:
        if empty and c.bouncer_before(1, 22):
            return (f"{c.named} does not re-apply an empty application_name (fixed in 1.22): upgrade, or never "
                    "set it to `''`; name the application at connect time (`application_name=...`).")
        return ("Name the application at connect time (the `application_name` connection parameter, which the "
                "pooler tracks per client) instead of `SET application_name`.")
    return rule


def custom_setting(o: Outcome, c: AdviceCell) -> str:
    lost = " When a client moves to another server its value stays behind (lost)." if o.verdict is Verdict.LOST \
        else ""
    return ("No pooler can track a custom setting (the server never reports it): set it in every transaction "
            f"that reads it, `set_config('leakcheck.tenant', ..., true)` or `SET LOCAL`.{lost}{reset_tail(c)}")


def _role(privileged: bool) -> Rule:
    def rule(o: Outcome, c: AdviceCell) -> str:
        worse = " B read data only that role may read: treat it as an access-control bug." if privileged else ""
        return ("Use `SET LOCAL ROLE ...` inside each transaction (it ends with the transaction), or a login role "
                f"per privilege level, each its own pool, instead of `SET ROLE` on a pooled connection.{worse}")
    return rule


def session_authorization(o: Outcome, c: AdviceCell) -> str:
    text = ("Do not `SET SESSION AUTHORIZATION` through a transaction pool: use `SET LOCAL SESSION AUTHORIZATION` "
            "per transaction, or log in as the role itself (no superuser application login).")
    if c.bouncer_before(1, 26):
        text += " PgBouncer 1.26+ re-applies every parameter the server reports (measure it before relying on it)."
    return text


def advisory_lock(o: Outcome, c: AdviceCell) -> str | None:
    if o.verdict is Verdict.BREAKS:
        return None
    where = ("stays on the server connection, held for whoever gets it next" if o.verdict is Verdict.LEAKS
             else "is not on the server connection the client has now")
    return (f"Use `pg_advisory_xact_lock(...)` (released at commit) instead of `pg_advisory_lock(...)`: a session "
            f"lock taken through a transaction pool {where}.{reset_tail(c)}")


def listen_notify(o: Outcome, c: AdviceCell) -> str:
    pin = c.advice.listen_pin
    return ("Run LISTEN on its own session: a direct connection to PostgreSQL, or a session-mode pool for the "
            f"listener (e.g. a second database entry with `pool_mode=session`){pin}; `NOTIFY` itself is fine "
            "through a transaction pool.")


def cancel_late(o: Outcome, c: AdviceCell) -> str:
    return ("A cancel sent after the client's own statement had ended stopped another client's statement on the "
            "same server connection: send cancels only while your statement runs (most drivers' cancel does), and "
            "bound statements with `SET LOCAL statement_timeout` rather than a late cancel.")


def temp_table(o: Outcome, c: AdviceCell) -> str:
    return ("Create temp tables `ON COMMIT DROP` and use them in that one transaction, or use a regular table keyed "
            f"by a session id; a plain temp table stays on the server connection.{reset_tail(c)}")


def with_hold_cursor(o: Outcome, c: AdviceCell) -> str:
    return ("Use a plain cursor inside one transaction, or keyset pagination (`WHERE id > $last ORDER BY id LIMIT "
            "n`), instead of `WITH HOLD`; if you must, `CLOSE` it before the transaction that opened it ends.")


def sql_prepare(o: Outcome, c: AdviceCell) -> str:
    tracked = c.advice.prepares_tracked or "poolers track at most protocol-level prepares"
    return (f"SQL `PREPARE`/`EXECUTE` pass through untouched, and {tracked}: use your driver's protocol-level "
            "prepares, or `PREPARE`, `EXECUTE` and `DEALLOCATE` in one transaction.")


def _prepare_fix(c: AdviceCell) -> str:
    """The pooler-side fix for protocol-level prepares, as this cell's pooler and version allow."""
    off = driver_off(c)
    name = c.advice.prepares_setting
    if name:
        on = c.setting(name)
        if on in ("yes", "on", "true"):
            return f"This cell already sets `{name} {on}`: {off}."
        return f"Set `{name} yes` on the {c.product} route, or {off}."
    if not c.is_bouncer:
        return f"If {c.product} is PgBouncer 1.21+, set `max_prepared_statements`; otherwise {off}."
    if c.version is None:
        return f"On PgBouncer 1.21+ set `max_prepared_statements` (default 200 since 1.24); otherwise {off}."
    if c.bouncer_before(1, 21):
        return (f"{c.named} cannot track protocol-level prepares (`max_prepared_statements` needs 1.21+; on by "
                f"default, 200, since 1.24): upgrade, or {off}.")
    given = c.setting("max_prepared_statements")
    if given == "0":
        return f"This cell runs `max_prepared_statements=0`: set it above 0 (e.g. 200), or {off}."
    if c.bouncer_before(1, 24):
        return (f"Set `max_prepared_statements` (e.g. 200; {c.named} defaults to 0, off), or {off}.")
    return (f"Check that `max_prepared_statements` is above 0 in {c.ini} (default 200 since 1.24), or {off}.")


def protocol_prepare(o: Outcome, c: AdviceCell) -> str:
    what = {Verdict.BREAKS: "Two clients' driver-named statements collide on one server connection",
            Verdict.LOST: "The client's prepared statement is not on the server it has now",
            Verdict.LEAKS: "Another client's prepared statement is visible on the shared server"}[o.verdict]
    return f"{what}. {_prepare_fix(c)}"


def cleanup(o: Outcome, c: AdviceCell) -> str:
    """Another client's DEALLOCATE ALL / DISCARD ALL / DEALLOCATE name under a prepared statement."""
    stop = ("Do not send `DEALLOCATE ALL`, `DISCARD ALL` or `DEALLOCATE name` through a transaction pool (Prisma's "
            "`pgbouncer=true`, a pool's reset query, an ORM's clean-up): on a shared server connection they drop "
            "other clients' statements")
    if o.verdict is Verdict.LEAKS:
        return f"{stop}; here the statements were prepared again for their owner, at the cost of a re-prepare."
    return f"{stop}; until then the other clients' next prepared runs may fail. {_prepare_fix(c)}"


def startup_parameters(o: Outcome, c: AdviceCell) -> str | None:
    if o.verdict is Verdict.NOT_APPLICABLE and c.is_bouncer:
        return (f"{c.named} refuses this startup parameter: set it per role (`ALTER ROLE app SET ...`) or per "
                "transaction (`SET LOCAL`), or add it to `ignore_startup_parameters` knowing it is then dropped.")
    if o.verdict is Verdict.LEAKS:
        return ("A setting one client sent at connect reached another client: set it per role or per transaction "
                "instead of in the connection string.")
    if o.verdict is Verdict.LOST:
        return ("The pooler accepted the startup parameter but the client's session lacks it: set it per role "
                "(`ALTER ROLE app SET ...`) or per transaction (`SET LOCAL`).")
    return None


def tracking_on(c: AdviceCell) -> bool:
    given = c.setting("max_prepared_statements")
    if given is not None:
        return given != "0"
    return c.bouncer_since(1, 24)


def prepared_disclosure(o: Outcome, c: AdviceCell) -> str:
    secret = "keep secrets out of SQL text (send them as bind parameters)"
    if c.is_bouncer and tracking_on(c):
        return (f"With `max_prepared_statements` on, PgBouncer shares prepared statements among a pool's clients by "
                f"design: {secret}, and give tenants that must not see each other their own pool (their own user "
                "or database entry).")
    return (f"Another client's driver-named statements stay on the shared server, readable in "
            f"`pg_prepared_statements`: {secret}, and {driver_off(c)} or use the pooler's prepared-statement support.")


def rls_tenant(o: Outcome, c: AdviceCell) -> str:
    return ("Set the tenant with `set_config('app.tenant', ..., true)` (transaction-local) in the same transaction "
            "as the queries it guards, never with `false` (session) on a pooled connection.")


def temp_shadow(o: Outcome, c: AdviceCell) -> str:
    return ("Schema-qualify real tables (`public.lc_audit`) and put `pg_temp` last (`SET LOCAL search_path = "
            "public, pg_temp`); create temp tables `ON COMMIT DROP` so none outlives its transaction.")


def search_path_emptied(o: Outcome, c: AdviceCell) -> str:
    if Fact.DISCONNECTED in o.facts and c.is_bouncer:
        return (f"{c.named} cannot put back an empty search_path for the client that set it (the connection is "
                "closed, \"invalid server parameter\"): run dumps and restores (pg_dump, pg_restore, psql -f of a "
                "dump) straight to PostgreSQL or through a session-mode pool, not through a transaction pool.")
    return ("Run dumps and restores straight to PostgreSQL or through a session-mode pool: pg_dump's first "
            "statement, `set_config('search_path', '', false)`, empties the path for whoever gets the server "
            "connection next. Schema-qualify the application's tables (`public.orders`) meanwhile.")


def cached_plan(o: Outcome, c: AdviceCell) -> str:
    return ("Schema-qualify the tables prepared statements read (`public.orders`), and keep other clients' "
            "session-level changes (`SET search_path`, temp tables named like real ones) off a transaction pool: "
            "a prepared statement re-planned on a shared server connection fails with 0A000 (cached plan must not "
            "change result type), or reads another table.")


def lastval(o: Outcome, c: AdviceCell) -> str:
    return ("Read generated ids in the statement that makes them (`INSERT ... RETURNING id`) instead of "
            "`lastval()`/`currval()` in a later transaction.")


def read_only(o: Outcome, c: AdviceCell) -> str:
    text = ("Use `BEGIN READ ONLY` (or `SET TRANSACTION READ ONLY`) per transaction, or a read-only role "
            "(`ALTER ROLE ... SET default_transaction_read_only = on`), instead of `SET SESSION CHARACTERISTICS`.")
    if c.bouncer_before(1, 26):
        text += " PgBouncer 1.26+ tracks default_transaction_read_only (measure it before relying on it)."
    return text


def replication_role(o: Outcome, c: AdviceCell) -> str:
    return ("Use `SET LOCAL session_replication_role = replica` inside the one transaction that needs it: as a "
            "session setting it skips triggers and foreign keys for whoever gets the server connection next.")


def idle_in_transaction_timeout(o: Outcome, c: AdviceCell) -> str:
    pooler = (" or PgBouncer's own `idle_transaction_timeout`" if c.is_bouncer else "")
    return ("Set it per role (`ALTER ROLE app SET idle_in_transaction_session_timeout = ...`)"
            f"{pooler} instead of a session `SET`: the next client's session can be ended by it.")


def client_encoding(o: Outcome, c: AdviceCell) -> str:
    return ("Give client_encoding at connect time (drivers do; poolers track it per client) and never `SET` it on "
            "a pooled connection.")


def temp_buffers_blocked(o: Outcome, c: AdviceCell) -> str | None:
    if o.verdict is Verdict.LEAKS:
        return ("Set `temp_buffers` per role (`ALTER ROLE app SET temp_buffers = ...`) or at connect time, never "
                "with a session `SET` after the server connection may have held another client's temp table (22023); "
                "prefer no temp tables across transactions (`ON COMMIT DROP`).")
    return None


def custom_setting_placeholder(o: Outcome, c: AdviceCell) -> str | None:
    if o.verdict is Verdict.LEAKS:
        return ("Write policies and code that read a custom setting to treat `''` like NULL "
                "(`nullif(current_setting('app.tenant', true), '')`): once any client on a server connection used "
                "the name, it stays defined there, empty, for every later client.")
    return None


def handover(o: Outcome, c: AdviceCell) -> str | None:
    """What a pooler's reset on a client's exit must undo before it hands the server to the next client."""
    if o.verdict is not Verdict.LEAKS:
        return None
    if c.advice.handover:
        return c.advice.handover.format(ini=c.ini)
    return ("Have the pooler run `DISCARD ALL` when a client disconnects, before the next client gets its server "
            "connection; meanwhile end the session's state yourself before disconnecting.")


RULES: dict[str, Rule] = {
    "statement_timeout": _per_transaction("statement_timeout", "SET LOCAL statement_timeout = '5s'"),
    "lock_timeout": _per_transaction("lock_timeout", "SET LOCAL lock_timeout = '1s'"),
    "search_path": search_path,
    "timezone": _tracked("TimeZone"),
    "timezone_moved": _tracked("TimeZone"),
    "datestyle": _tracked("DateStyle"),
    "intervalstyle": _tracked("IntervalStyle", (1, 20), "tracked through `track_extra_parameters`"),
    "application_name": _application_name(empty=False),
    "application_name_empty": _application_name(empty=True),
    "custom_setting": custom_setting,
    "custom_setting_moved": custom_setting,
    "set_role": _role(privileged=False),
    "set_role_privileged": _role(privileged=True),
    "session_authorization": session_authorization,
    "advisory_lock": advisory_lock,
    "listen_notify": listen_notify,
    "cancel_late": cancel_late,
    "temp_table": temp_table,
    "with_hold_cursor": with_hold_cursor,
    "sql_prepare": sql_prepare,
    "protocol_prepare": protocol_prepare,
    "protocol_prepare_moved": protocol_prepare,
    "prepared_disclosure": prepared_disclosure,
    "cleanup_deallocate_all": cleanup,
    "cleanup_discard_all": cleanup,
    "cleanup_deallocate_named": cleanup,
    "startup_parameters": startup_parameters,
    "rls_tenant": rls_tenant,
    "temp_shadow": temp_shadow,
    "lastval": lastval,
    "read_only": read_only,
    "replication_role": replication_role,
    "idle_in_transaction_timeout": idle_in_transaction_timeout,
    "client_encoding": client_encoding,
    "temp_buffers_blocked": temp_buffers_blocked,
    "custom_setting_placeholder": custom_setting_placeholder,
    "search_path_emptied": search_path_emptied,
    "cached_plan_temp_table": cached_plan,
    "cached_plan_search_path": cached_plan,
    **{p: handover for p in ("handover_setting", "handover_temp_table", "handover_advisory_lock", "handover_prepare",
                             "handover_listen", "handover_role")},
}
