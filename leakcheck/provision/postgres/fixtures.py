"""The roles and objects the probes use, made once per PostgreSQL server by its superuser.

Both backends run `STATEMENTS` in the leakcheck database right after creating it; the native
backend keeps the result in its cached template, whose name carries `FINGERPRINT`, so a change
here builds a new template instead of reusing a stale one.
"""

from __future__ import annotations

import hashlib
from typing import Any

import psycopg
from psycopg import sql

from leakcheck.model.errors import UsageError
from leakcheck.model.versions import Version

#: The application role the probes' clients log in as: no superuser, no inherited table privileges.
APP_ROLE = "leakcheck_app"

#: The oldest PostgreSQL `STATEMENTS` run on: GRANT ... WITH INHERIT FALSE is new in 16.
OLDEST_PG = Version((16,))


def refuse_older(version: Version, given: str) -> None:
    """One line (a UsageError) when `version` is older than OLDEST_PG: no probe could be measured there."""
    if version.parts[:1] < OLDEST_PG.parts:
        raise UsageError(f"{given}: PostgreSQL {version} is older than {OLDEST_PG}, the oldest leakcheck measures (the "
                         f"probes' roles need GRANT ... WITH INHERIT FALSE, new in 16); give {OLDEST_PG} or newer, "
                         "e.g. --pg=16,17,18")


STATEMENTS: tuple[str, ...] = (
    f"CREATE ROLE {APP_ROLE} LOGIN",
    "CREATE ROLE leakcheck_other NOLOGIN",  # set_role: a role A switches to
    "CREATE ROLE leakcheck_priv NOLOGIN",  # set_role_privileged: may read lc_secret
    # SET ROLE only: the application role inherits no privilege of these (PostgreSQL 16+).
    f"GRANT leakcheck_other, leakcheck_priv TO {APP_ROLE} WITH INHERIT FALSE",
    # The identity proof reads backend_start in pg_stat_activity, also after SET ROLE and
    # SET SESSION AUTHORIZATION: whoever a session becomes must be able to see it.
    f"GRANT pg_read_all_stats TO {APP_ROLE}, leakcheck_other, leakcheck_priv",
    f"GRANT SET ON PARAMETER session_replication_role TO {APP_ROLE}",
    # set_role_privileged: a table only leakcheck_priv may read.
    "CREATE TABLE lc_secret (secret text)",
    "INSERT INTO lc_secret VALUES ('only leakcheck_priv may read this')",
    "GRANT SELECT ON lc_secret TO leakcheck_priv",
    # rls_tenant*: rows shown by a policy on a tenant setting.
    "CREATE TABLE lc_tenant_rows (tenant text, secret text)",
    "INSERT INTO lc_tenant_rows VALUES ('tenant_a', 'a-invoice-1'), ('tenant_a', 'a-invoice-2'), "
    "('tenant_b', 'b-invoice-1')",
    "ALTER TABLE lc_tenant_rows ENABLE ROW LEVEL SECURITY",
    "CREATE POLICY lc_tenant ON lc_tenant_rows USING (tenant = current_setting('app.tenant', true))",
    f"GRANT SELECT ON lc_tenant_rows TO {APP_ROLE}",
    # temp_shadow, read_only, session_authorization: a table B writes to.
    "CREATE TABLE lc_audit (note text, who text DEFAULT session_user)",
    f"GRANT SELECT, INSERT, DELETE ON lc_audit TO {APP_ROLE}",
    # replication_role: a foreign key that replica mode skips.
    "CREATE TABLE lc_parent (id int PRIMARY KEY)",
    "CREATE TABLE lc_child (parent int REFERENCES lc_parent)",
    f"GRANT SELECT ON lc_parent TO {APP_ROLE}",
    f"GRANT SELECT, INSERT, DELETE ON lc_child TO {APP_ROLE}",
    # lastval: a sequence.
    "CREATE SEQUENCE lc_seq",
    f"GRANT USAGE, SELECT ON lc_seq TO {APP_ROLE}",
    # the outcome oracles (probes/outcomes.py): every row a client writes, read back after the run
    "CREATE TABLE lc_writes (id text PRIMARY KEY, who text NOT NULL)",
    f"GRANT SELECT, INSERT, UPDATE ON lc_writes TO {APP_ROLE}",
    # cached_plan_search_path: a table named like lc_audit in a schema of its own, its note an int
    "CREATE SCHEMA lc_plan",
    "CREATE TABLE lc_plan.lc_audit (note int, who text)",
    "INSERT INTO lc_plan.lc_audit VALUES (7, 'lc_plan')",
    f"GRANT USAGE ON SCHEMA lc_plan TO {APP_ROLE}",
    f"GRANT SELECT ON lc_plan.lc_audit TO {APP_ROLE}",
)

#: An SQL expression: true when a database has these roles and objects (a running pooler's, --pooled-dsn).
#: The session's own user must be able to SET ROLE to leakcheck_other and leakcheck_priv.
PRESENT = ("(CASE WHEN (SELECT count(*) FROM pg_roles WHERE rolname IN ('leakcheck_other', 'leakcheck_priv', "
           f"'{APP_ROLE}')) = 3 THEN pg_has_role(session_user, 'leakcheck_other', 'MEMBER') AND "
           "pg_has_role(session_user, 'leakcheck_priv', 'MEMBER') ELSE false END "
           "AND to_regclass('public.lc_secret') IS NOT NULL AND to_regclass('public.lc_tenant_rows') IS NOT NULL "
           "AND to_regclass('public.lc_audit') IS NOT NULL AND to_regclass('public.lc_child') IS NOT NULL "
           "AND to_regclass('public.lc_seq') IS NOT NULL AND to_regclass('public.lc_writes') IS NOT NULL "
           "AND to_regclass('lc_plan.lc_audit') IS NOT NULL)")


def grants_for(role: str) -> tuple[str, ...]:
    """What the application role is granted, for another role (`leakcheck fixtures --role`: the role a
    running pooler's DSN logs in as)."""
    quoted = '"' + role.replace('"', '""') + '"'
    return tuple(s.replace(APP_ROLE, quoted) for s in STATEMENTS if s.startswith("GRANT") and APP_ROLE in s)

FINGERPRINT = hashlib.sha256("\n".join(STATEMENTS).encode()).hexdigest()[:10]


#: SCRAM's key-stretching rounds for this run's passwords: PostgreSQL's default. Fewer would protect
#: nothing less (192-bit random secrets living for one run) but pgjdbc 42.5.5 refuses a server's SCRAM
#: challenge of fewer than 4096 rounds; 4096 cost one PBKDF2 of about 1 ms per direct login (measured
#: here with OpenSSL), which a run of every driver does not notice.
SCRAM_ITERATIONS = 4096


def set_passwords(conn: psycopg.Connection[Any], credentials: tuple[tuple[str, str], ...]) -> None:
    """This run's passwords (stored as SCRAM secrets); cached templates and images hold none."""
    conn.execute(sql.SQL("SET scram_iterations = {}").format(sql.Literal(SCRAM_ITERATIONS)))
    for role, password in credentials:
        conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier(role), sql.Literal(password)))


def apply(conn: psycopg.Connection[Any]) -> None:
    """Create everything, in the leakcheck database, as its superuser (one transaction)."""
    with conn.transaction():
        for statement in STATEMENTS:
            conn.execute(statement)


#: What `leakcheck fixtures --drop` removes: the objects of that database. Roles belong to the whole
#: cluster (other databases may use them), so they are kept.
DROP = (
    "DROP TABLE IF EXISTS lc_secret, lc_tenant_rows, lc_audit, lc_child, lc_parent, lc_writes",
    "DROP SEQUENCE IF EXISTS lc_seq",
    "DROP SCHEMA IF EXISTS lc_plan CASCADE",
)


def install(conn: psycopg.Connection[Any], role: str | None, drop: bool = False) -> list[str]:
    """Create (or with `drop`, remove) the probes' roles and objects in the connected database, as a
    superuser, for a running pooler's database; `role`: also grant the application role's rights to
    it (the role --pooled-dsn logs in as). What was done, one line each."""
    with conn.transaction():
        if drop:
            for statement in DROP:
                conn.execute(statement)
            return ["dropped leakcheck's test tables (the roles leakcheck_other, leakcheck_priv and "
                    f"{APP_ROLE} belong to the whole server and are kept: drop them when nothing uses them)"]
        row = conn.execute("SELECT to_regclass('public.lc_audit') IS NOT NULL").fetchone()
        done = []
        if row and row[0]:
            done.append("leakcheck's test roles and tables are already there")
        else:
            roles = {r[0] for r in conn.execute("SELECT rolname FROM pg_roles").fetchall()}
            for statement in STATEMENTS:
                words = statement.split()
                if words[:2] != ["CREATE", "ROLE"] or words[2] not in roles:  # roles are the whole server's
                    conn.execute(statement)
            done.append(f"created leakcheck's test roles and tables ({len(STATEMENTS)} statements)")
        if role:
            for statement in grants_for(role):
                conn.execute(statement)
            done.append(f"granted {role} what {APP_ROLE} has (SET ROLE leakcheck_other/leakcheck_priv, the tables)")
        return done
