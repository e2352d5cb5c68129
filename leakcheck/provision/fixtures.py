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

#: The application role the probes' clients log in as: no superuser, no inherited table privileges.
APP_ROLE = "leakcheck_app"

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
)

FINGERPRINT = hashlib.sha256("\n".join(STATEMENTS).encode()).hexdigest()[:10]


#: SCRAM's key-stretching rounds for this run's passwords. They are 192-bit random secrets that live
#: for one run, so stretching protects nothing, while 4096 rounds cost ~4 ms per connection, twice.
SCRAM_ITERATIONS = 16


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
