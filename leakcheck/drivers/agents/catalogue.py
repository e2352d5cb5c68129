"""The agents leakcheck ships: each driver id, its spec, and how its statements are named.

A driver's statement names matter to the prepared probes: "B saw A's statement under the name A's
driver gave it" needs that name, as a SQL condition on pg_prepared_statements.name (PgBouncer's
own names, PGBOUNCER_n, must not match it). Each agent is one file of its own language in
leakcheck/drivers/agents/<id>/, speaking the agent protocol (docs/agent-protocol.md). pgx v5 and Npgsql are
not shipped: they need a Go module proxy and NuGet, which this project's machines do not reach.
"""

from __future__ import annotations

from dataclasses import dataclass

from leakcheck.drivers.agents.spec import AgentSpec
from leakcheck.model.errors import NotApplicable
from leakcheck.model.target import NATIVE_DRIVERS

_NODE = ("node", "{dir}/agent.js")

#: Debian's pgjdbc jar (libpostgresql-jdbc-java)
PGJDBC_JAR = "/usr/share/java/postgresql.jar"
#: Debian's junixsocket (libjunixsocket-java, its JNI library with it): pgjdbc's socket factory for a
#: Unix-socket host (a fleet's member); java skips a classpath entry that is not there
JUNIXSOCKET_JAR = "/usr/share/java/junixsocket-common.jar"

#: pgx's release is not introspectable in GOPATH mode: read from dpkg at build time, linked in.
PGX_BUILD = (
    "sh", "-c",
    'cd "$1" && GOPATH=/usr/share/gocode GO111MODULE=off GOCACHE="$1/.gocache" '
    'go build -o agent -ldflags "-X main.release=$(dpkg-query -W -f=\'${source:Upstream-Version}\' '
    'golang-github-jackc-pgx-v4-dev)" main.go && rm -rf "$1/.gocache"',
    "sh", "{dir}",
)


#: A driver that speaks protocol 3.0 only (its startup packet asks for 3.0, with no setting for another).
_V3_ONLY = "{} speaks protocol 3.0 only: it has no setting to ask for 3.2"
#: A driver that links Debian bookworm's libpq 15.
_LIBPQ_15 = "{} links Debian's libpq 15, which speaks protocol 3.0 only (max_protocol_version is libpq 18's)"
#: A driver whose public API sends no Close message of a statement inside a batch without a Sync.
_NO_PIPELINE = "{} has no public call that sends Parse and Close messages in one batch without a Sync"


@dataclass(frozen=True)
class Shipped:
    """One agent of the catalogue."""

    spec: AgentSpec
    #: a SQL condition on `name` that holds for the names this driver gives its prepared statements
    statement_names: str
    #: how a probe's startup parameter reaches this driver's startup packet: (the agent's setting, its
    #: value with {name} and {value}); () where the driver has no way
    startup: tuple[str, str] | tuple[()] = ()
    #: executions of one statement before the driver prepares it by name (pgjdbc: its prepareThreshold)
    prepared_times: int = 1
    #: what the driver refuses to go on with, by the start of its message, and why: such a probe step
    #: cannot apply to this driver (not applicable, with the driver's words), it is no measurement
    refusals: tuple[tuple[str, str], ...] = ()
    #: the driver names statements from a counter of the whole process (pgx's lrupsc_N_M), not per
    #: connection: its agents serve one probe each (client.py), so A's and B's histories are equal
    names_per_process: bool = False
    #: why the driver cannot ask for a newer protocol than 3.0 (PostgreSQL 18's 3.2): agent protocol 1's
    #: connect has no field for it, and no shipped driver here could
    protocols: str = "agent protocol 1's connect has no way to ask for a protocol version"
    #: why the agent offers no `copy_in` (where it offers it, its hello lists the op)
    copy: str = "its hello does not offer the op (docs/agent-protocol.md)"
    #: why the agent sends no pipeline of Parse and Close messages
    pipeline: str = "agent protocol 1 has no op that sends Parse and Close messages in one batch"

    def startup_settings(self, startup: tuple[str, str]) -> dict[str, str]:
        """The connect request's settings that make the driver send `startup` (name, value) at connect."""
        if not self.startup:
            raise NotApplicable(f"the {self.spec.id} agent has no setting that sends {startup[0]} at connect")
        setting, template = self.startup
        return {setting: template.format(name=startup[0], value=startup[1])}


CATALOGUE: tuple[Shipped, ...] = (
    # node-postgres: a query config with `name` (the agent names them stmt_1, stmt_2... per connection)
    Shipped(AgentSpec("node-postgres", "node", ("agent.js",), npm=("pg@8",), run=_NODE, settings=(("options", ""),)),
            "name LIKE 'stmt\\_%'", ("options", "-c {name}={value}"), protocols=_V3_ONLY.format("pg 8"),
            copy="pg 8 has no COPY FROM STDIN of its own (pg-copy-streams is another package)",
            pipeline=_NO_PIPELINE.format("pg 8")),
    # postgres.js: prepares every query by default, named by a random per-connection prefix and a counter
    Shipped(AgentSpec("postgres-js", "node", ("agent.js",), npm=("postgres@3",), run=_NODE,
                      settings=(("prepare", "true"),)),
            "name ~ '^[0-9a-z]+$'", protocols=_V3_ONLY.format("postgres.js 3"),
            pipeline=_NO_PIPELINE.format("postgres.js 3")),
    # pgjdbc: a cached PreparedStatement, named S_n by the server-side prepare past prepareThreshold
    Shipped(
        AgentSpec(
            id="pgjdbc",
            language="java",
            sources=("Agent.java",),
            apt=("default-jdk-headless", "libpostgresql-jdbc-java", "libjunixsocket-java"),  # javac builds it
            build=(("javac", "-cp", PGJDBC_JAR, "-d", "{dir}", "{dir}/Agent.java"),),
            run=("java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                 "-cp", f"{{dir}}:{PGJDBC_JAR}:{JUNIXSOCKET_JAR}", "Agent"),
            settings=(
                ("prepareThreshold", "5"),
                ("preferQueryMode", "extended"),
                ("preparedStatementCacheQueries", "256"),
                ("autosave", "never"),
                ("binaryTransfer", "true"),
                ("currentSchema", ""),
                ("options", ""),
                ("readOnlyMode", "transaction"),
            ),
            # pgjdbc 42.5.5 sends extra_float_digits in every startup packet (ConnectionFactoryImpl)
            ignored_startup=("extra_float_digits",),
        ),
        "name LIKE 'S\\_%'",
        ("options", "-c {name}={value}"),  # pgjdbc's own for search_path is currentSchema, also a startup parameter
        prepared_times=5,
        protocols=_V3_ONLY.format("pgjdbc 42.5"),
        pipeline=_NO_PIPELINE.format("pgjdbc 42.5"),
        refusals=(
            ("The server's client_encoding parameter was changed", "pgjdbc closes its connection when "
             "client_encoding is not UTF8"),
            ("The server's DateStyle parameter was changed", "pgjdbc closes its connection when DateStyle "
             "does not begin with ISO"),
        ),
    ),
    # PHP PDO: prepare() + execute(), named pdo_stmt_%08x (ATTR_EMULATE_PREPARES false, the default)
    Shipped(
        AgentSpec(
            id="pdo",
            language="php",
            sources=("agent.php",),
            apt=("php8.2-cli", "php8.2-pgsql"),
            run=("php", "{dir}/agent.php"),
            settings=(("ATTR_EMULATE_PREPARES", "false"), ("PGSQL_ATTR_DISABLE_PREPARES", "false")),
        ),
        "name LIKE 'pdo\\_stmt\\_%'",
        protocols=_LIBPQ_15.format("pdo_pgsql"),
        copy="PDO's pgsqlCopyFromArray sends every row in one call: no first row on its own, the rest later",
        pipeline=_NO_PIPELINE.format("PDO"),
    ),
    # ruby-pg: prepare('a1', ...) + exec_prepared, Rails' names a1, a2... per connection
    Shipped(
        AgentSpec(
            id="ruby-pg",
            language="ruby",
            sources=("agent.rb",),
            apt=("ruby-pg",),
            run=("ruby", "{dir}/agent.rb"),
            settings=(("options", ""), ("application_name", "")),
        ),
        "name ~ '^a[0-9]+$'",
        ("options", "-c {name}={value}"),
        protocols=_LIBPQ_15.format("ruby-pg"),
        pipeline="ruby-pg's pipeline mode has no Close of a statement with Debian's libpq 15 "
        "(PQsendClosePrepared is libpq 17's)",
    ),
    # pgx v4: its statement cache (default mode prepare), named lrupsc_N_M
    Shipped(
        AgentSpec(
            id="pgx",
            language="go",
            sources=("main.go",),
            apt=("golang-go", "golang-github-jackc-pgx-v4-dev"),
            build=(PGX_BUILD,),
            run=("{dir}/agent",),
            settings=(
                ("statement_cache_mode", "prepare"),
                ("statement_cache_capacity", "512"),
                ("prefer_simple_protocol", "false"),
                ("options", ""),
                ("application_name", ""),
            ),
        ),
        "name LIKE 'lrupsc\\_%'",
        ("options", "-c {name}={value}"),
        refusals=(("simple protocol queries must be run with client_encoding=UTF8",
                   "pgx runs no simple-protocol query unless client_encoding is UTF8"),),
        names_per_process=True,  # N in lrupsc_N_M counts the process's statement caches (one per connection)
        protocols=_V3_ONLY.format("pgx v4"),
        pipeline="pgx v4's batch (pgconn.Batch) has no Close message",
    ),
)


def shipped(driver_id: str) -> Shipped | None:
    """The catalogue's entry for a driver id, or None (psycopg, asyncpg and unknown ids)."""
    return next((s for s in CATALOGUE if s.spec.id == driver_id), None)


def known_drivers() -> tuple[str, ...]:
    """Every driver id --drivers takes: this process's own, then the agents'."""
    return (*(d.value for d in NATIVE_DRIVERS), *(s.spec.id for s in CATALOGUE))
