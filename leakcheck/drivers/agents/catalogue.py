"""The agents leakcheck ships: each driver id, its spec, and how its statements are named.

A driver's statement names matter to the prepared probes: "B saw A's statement under the name A's
driver gave it" needs that name, as a SQL condition on pg_prepared_statements.name (PgBouncer's
own names, PGBOUNCER_n, must not match it). Each agent is one file of its own language in
leakcheck/drivers/agents/<id>/ (with its package manager's files: go.mod and go.sum, Cargo.toml and
Cargo.lock, pom.xml), speaking the agent protocol (docs/agent-protocol.md). Debian's archive gives
pgjdbc 42.5, PDO, ruby-pg and pgx v4; npm node-postgres and postgres.js; the Go module proxy pgx v5;
crates.io sqlx and tokio-postgres; Maven Central pgjdbc's latest (pgjdbc-maven, Debian's Agent.java
with that jar). ORMs run as applications: Django and SQLAlchemy (PyPI), ActiveRecord (Debian), Prisma 7
(npm) and Spring Boot + Hibernate + HikariCP (Maven Central). Npgsql is not shipped: NuGet is not reached
from this project's machines.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from leakcheck.drivers.agents.spec import AgentSpec
from leakcheck.model.errors import NotApplicable
from leakcheck.model.target import NATIVE_DRIVERS

_NODE = ("node", "{dir}/agent.js")

#: Debian's pgjdbc jar (libpostgresql-jdbc-java)
PGJDBC_JAR = "/usr/share/java/postgresql.jar"
#: Debian's junixsocket (libjunixsocket-java, its JNI library with it): pgjdbc's socket factory for a
#: Unix-socket host (a fleet's member); java skips a classpath entry that is not there
JUNIXSOCKET_JAR = "/usr/share/java/junixsocket-common.jar"

#: Maven resolves an agent's pom.xml into a repository of its own cache folder (never ~/.m2) and copies the
#: jars it runs with into lib/
MAVEN_LIB = ("mvn", "-B", "-q", "-Dstyle.color=never", "-Dmaven.repo.local={cache}/m2", "dependency:copy-dependencies",
             "-DoutputDirectory={dir}/lib", "-DincludeScope=runtime", "-Dmdep.stripVersion=true")

#: Every JVM agent (Agent.java's KeptSaltedPasswords) keeps SCRAM's SaltedPassword per password, salt and rounds, as
#: RFC 5802 5.1 lets a client: C1 has no SHA-256 intrinsic (~13 ms of CPU a login); every connect is a full login.
#: A JVM agent's class-data archive (Java's AppCDS): the build runs it once with ArchiveClassesAtExit to archive the
#: classes it loads (Agent.java's loadJarOf: every class of the driver's jar, and for hibernate what Spring Boot and
#: Hibernate load at boot), and each start maps them instead of reading and verifying them again. The archive takes
#: jars only, named relative to the agent's folder (the build's is renamed into place), where the agent starts.
JVM = ("java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xlog:disable", "-Xlog:all=warning:stderr")
ARCHIVED = "-XX:SharedArchiveFile={dir}/agent.jsa"
ARCHIVE = "-XX:ArchiveClassesAtExit={dir}/agent.jsa"


def _pgjdbc_build(jar: str) -> tuple[tuple[str, ...], ...]:
    """pgjdbc's Agent.java compiled against `jar` (pgjdbc's classpath as the agent runs: relative to its folder,
    or absolute) into agent.jar, then its archive run."""
    compile_with = jar if jar.startswith("/") else f"{{dir}}/{jar}"
    return (("javac", "-cp", compile_with, "-d", "{dir}/classes", "{dir}/Agent.java"),
            ("jar", "cf", "{dir}/agent.jar", "-C", "{dir}/classes", "."),
            (*JVM, ARCHIVE, "-cp", f"agent.jar:{jar}:{JUNIXSOCKET_JAR}", "Agent", "--load-and-exit"))


#: The hibernate agent's JVM, started in its folder: the classes Spring Boot and Hibernate load at boot are
#: archived by the build (Java's AppCDS: about 40% less CPU per agent), which takes jars only, named relative
#: to the folder (the build's is renamed into place); the JVM's own warnings on stderr (stdout is the protocol's)
HIBERNATE_JAVA = (*JVM, "-cp", f"agent.jar:lib/*:{JUNIXSOCKET_JAR}")

#: `prisma generate` with nothing from outside npm: Prisma's CLI fetches its schema engine (for migrations,
#: never run by generate, which uses the npm package's wasm) from binaries.prisma.sh before any command;
#: PRISMA_SCHEMA_ENGINE_BINARY, its way to name an engine of one's own, names one that fails if ever run.
#: No update check or telemetry (checkpoint.prisma.io); its own cache (a last-generate stamp) in the agent's
#: build cache, not ~/.cache.
PRISMA_ENV = (("PRISMA_SCHEMA_ENGINE_BINARY", "/bin/false"), ("CHECKPOINT_DISABLE", "1"),
              ("PRISMA_HIDE_UPDATE_MESSAGE", "1"), ("XDG_CACHE_HOME", "{cache}"))

#: pgx's release is not introspectable in GOPATH mode: read from dpkg at build time, linked in.
PGX_BUILD = (
    "sh", "-c",
    'cd "$1" && GOPATH=/usr/share/gocode GO111MODULE=off GOCACHE="$1/.gocache" '
    'go build -o agent -ldflags "-X main.release=$(dpkg-query -W -f=\'${source:Upstream-Version}\' '
    'golang-github-jackc-pgx-v4-dev)" main.go protocol.go && rm -rf "$1/.gocache"',
    "sh", "{dir}",
)

#: cargo's registry and target folder in the agent's own cache folder, never ~/.cargo's registry; the Rust
#: release for the agent's hello
CARGO_ENV = (("CARGO_HOME", "{cache}/cargo"), ("CARGO_TARGET_DIR", "{cache}/target"),
             ("AGENT_RUST_VERSION", "{cargo_version}"))


#: What the Rust agents share (the protocol's failures, answers and hello), beside their main.rs
RUST_PROTOCOL = "../sqlx/protocol.rs"
#: What the Python ORM agents share (the request loop, answers, hello, the harness ops, cancel), beside their agent.py,
#: and their preloader (as gunicorn --preload: each agent a fork of one process that imported it)
PYTHON_SHARED = ("../django/protocol.py", "../django/preload.py")
#: What the Ruby agents share (failure answers, the request loop, typed values, notifications), beside their agent.rb
RUBY_PROTOCOL = "../ruby-pg/protocol.rb"


def _cargo(agent: str, minimum: str, settings: tuple[tuple[str, str], ...]) -> AgentSpec:
    """A Rust agent: main.rs, the shared protocol.rs, Cargo.toml and Cargo.lock, its crates fetched (`cargo
    fetch --locked`) and built into the cache; `minimum` is the oldest Rust its locked crates build with
    (their rust-version)."""
    return AgentSpec(
        id=agent, language="rust", sources=("main.rs", RUST_PROTOCOL, "Cargo.toml", "Cargo.lock"),
        build=(("{cargo}", "fetch", "--locked"), ("{cargo}", "build", "--locked", "--offline", "--quiet"),
               ("cp", "{cache}/target/debug/agent", "{dir}/agent")),
        build_env=CARGO_ENV, tools=(("cargo", minimum),), build_timeout=900.0, run=("{dir}/agent",),
        settings=settings)


#: Go's module and build caches in the agent's own cache folder (install.py's `{cache}`), never ~/go; no
#: toolchain download (GOTOOLCHAIN=local: the Go found builds it or says why not), no telemetry files
GO_ENV = (("GOMODCACHE", "{cache}/gomod"), ("GOCACHE", "{cache}/gocache"), ("GOTOOLCHAIN", "local"),
          ("GOFLAGS", "-mod=readonly -modcacherw -buildvcs=false"), ("GOTELEMETRY", "off"))


#: The ORM agents' psycopg (the one leakcheck itself uses), pinned with what pip brought with it, and
#: how a venv agent starts (install.py makes {dir}/venv with Debian's python3), and its preloader.
_PSYCOPG = ("psycopg==3.3.9", "psycopg-binary==3.3.9", "typing_extensions==4.16.0")
_VENV = ("{dir}/venv/bin/python", "{dir}/agent.py")
_VENV_PRELOAD = (*_VENV, "--preload", "{fd}")


#: A driver that speaks protocol 3.0 only (its startup packet asks for 3.0, with no setting for another).
_V3_ONLY = "{} speaks protocol 3.0 only: it has no setting to ask for 3.2"
#: A driver that links Debian bookworm's libpq 15.
_LIBPQ_15 = "{} links Debian's libpq 15, which speaks protocol 3.0 only (max_protocol_version is libpq 18's)"
#: A driver whose public API sends no Close message of a statement inside a batch without a Sync.
_NO_PIPELINE = "{} has no public call that sends Parse and Close messages in one batch without a Sync"


#: Lanes a core runs at once where agents run (run/lanes.py's default_jobs), unless an entry asks fewer
AGENT_LANES = 4


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
    #: the refusals are of a value the server reported (a ParameterStatus), not of a call the driver cannot
    #: make: what the driver then does to its connection, "closes" it or "keeps" it. A value another
    #: application set reaching it is its application's loss (breaks), never "not applicable" (run/runner.py)
    refused_values: Literal["", "closes", "keeps"] = ""
    #: the driver names statements from a counter of the whole process (pgx's lrupsc_N_M), not per
    #: connection: an agent of it serves a later probe only where its close answer said `named` false (its
    #: counter where a fresh process's is: client.py), so every probe starts with counters where a fresh
    #: process's are
    names_per_process: bool = False
    #: why the driver cannot ask for a newer protocol than 3.0 (PostgreSQL 18's 3.2): agent protocol 1's
    #: connect has no field for it, and no shipped driver here could
    protocols: str = "agent protocol 1's connect has no way to ask for a protocol version"
    #: why the agent offers no `copy_in` (where it offers it, its hello lists the op)
    copy: str = "its hello does not offer the op (docs/agent-protocol.md)"
    #: why the agent sends no pipeline of Parse and Close messages
    pipeline: str = "agent protocol 1 has no op that sends Parse and Close messages in one batch"
    #: lanes a core runs at once in a matrix of this driver (run/lanes.py): each lane keeps agents of its own,
    #: and where each costs more CPU to start and warm than its lane's waits hide, fewer lanes finish sooner
    lanes_per_core: int = AGENT_LANES

    def startup_settings(self, startup: tuple[str, str]) -> dict[str, str]:
        """The connect request's settings that make the driver send `startup` (name, value) at connect."""
        if not self.startup:
            raise NotApplicable(f"the {self.spec.id} agent has no setting that sends {startup[0]} at connect")
        setting, template = self.startup
        return {setting: template.format(name=startup[0], value=startup[1])}


#: pgjdbc (Debian): a cached PreparedStatement, named S_n by the server-side prepare past prepareThreshold
_PGJDBC = Shipped(
    AgentSpec(
        id="pgjdbc",
        language="java",
        sources=("Agent.java",),
        apt=("default-jdk-headless", "libpostgresql-jdbc-java", "libjunixsocket-java"),  # javac builds it
        build=_pgjdbc_build(PGJDBC_JAR),
        run=(*JVM, ARCHIVED, "-cp", f"agent.jar:{PGJDBC_JAR}:{JUNIXSOCKET_JAR}", "Agent"),
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
    protocols=_V3_ONLY.format("pgjdbc"),
    pipeline=_NO_PIPELINE.format("pgjdbc"),
    refusals=(
        ("The server's client_encoding parameter was changed", "pgjdbc closes its connection when "
         "client_encoding is not UTF8"),
        ("The server's DateStyle parameter was changed", "pgjdbc closes its connection when DateStyle "
         "does not begin with ISO"),
    ),
    refused_values="closes",
    # Each lane's A, B and C are JVMs of their own: on 2 cores the default matrix took 32, 40 s with 4 lanes, 36,
    # 41 s with 6 and 40, 41 s with 8 (pytest's CPU 52, 60; 64, 70; 70, 73 s; 2026-12-07)
    lanes_per_core=2,
)

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
    _PGJDBC,
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
            sources=("agent.rb", RUBY_PROTOCOL),
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
            sources=("main.go", "protocol.go"),
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
        refused_values="keeps",
        # N in lrupsc_N_M counts the process's statement caches (one per connection): the agent sets it back
        # to 0 once its close left no connection, and says `named` false then
        names_per_process=True,
        protocols=_V3_ONLY.format("pgx v4"),
        pipeline="pgx v4's batch (pgconn.Batch) has no Close message",
    ),
    # pgx v5 (the Go module proxy's, go.mod): its default_query_exec_mode cache_statement prepares named
    # statements stmtcache_<sha256 of the text> (the same name for the same text in every process)
    Shipped(
        AgentSpec(
            id="pgx-v5",
            language="go",
            sources=("main.go", "../pgx/protocol.go", "go.mod", "go.sum"),  # pgx v4's protocol.go, shared
            build=(("{go}", "mod", "download"), ("{go}", "build", "-trimpath", "-o", "{dir}/agent", ".")),
            build_env=GO_ENV,
            tools=(("go", "1.25"),),  # pgx v5.13's go.mod says go 1.25.0
            run=("{dir}/agent",),
            settings=(
                ("default_query_exec_mode", "cache_statement"),
                ("statement_cache_capacity", "512"),
                ("description_cache_capacity", "512"),
                ("options", ""),
                ("application_name", ""),
            ),
        ),
        "name LIKE 'stmtcache\\_%'",
        ("options", "-c {name}={value}"),
        refusals=(("simple protocol queries must be run with client_encoding=UTF8",
                   "pgx runs no simple-protocol query unless client_encoding is UTF8"),
                  ("simple protocol queries must be run with standard_conforming_strings=on",
                   "pgx runs no simple-protocol query unless standard_conforming_strings is on")),
        refused_values="keeps",
        protocols="the pgx-v5 agent gives pgconn no protocol setting: it asks for 3.0, pgconn's default",
        pipeline="the pgx-v5 agent sends no pgconn Pipeline (SendPrepare, SendDeallocate) of its own",
    ),
    # sqlx 0.9 (crates.io, Cargo.lock): `query(text)` is persistent by default, its statement cache names
    # the statements sqlx_s_N per connection
    Shipped(
        replace(_cargo("sqlx", "1.94", (("statement_cache_capacity", "100"), ("persistent", "true"),
                                        ("options", ""), ("application_name", ""))),
                ignored_startup=("extra_float_digits",)),  # sqlx 0.9 sends extra_float_digits=2 at every connect
        "name LIKE 'sqlx\\_s\\_%'",
        ("options", "-c {name}={value}"),
        protocols=_V3_ONLY.format("sqlx 0.9"),
        pipeline=_NO_PIPELINE.format("sqlx 0.9"),
    ),
    # tokio-postgres 0.7 (crates.io, Cargo.lock): Client::prepare names statements s0, s1... from a counter
    # of the whole process, not of the connection (its agent says `named` once its driver wrote a named Parse)
    Shipped(
        _cargo("tokio-postgres", "1.85", (("method", "prepare"), ("options", ""), ("application_name", ""))),
        "name ~ '^s[0-9]+$'",
        ("options", "-c {name}={value}"),
        names_per_process=True,
        protocols=_V3_ONLY.format("tokio-postgres 0.7"),
        pipeline=_NO_PIPELINE.format("tokio-postgres 0.7"),
    ),
    # pgjdbc from Maven Central beside Debian's: the same Agent.java with the jar pom.xml names, resolved by
    # Maven into a repository of the agent's cache folder (never ~/.m2)
    replace(
        _PGJDBC,
        spec=replace(
            _PGJDBC.spec,
            id="pgjdbc-maven",
            sources=("pom.xml", "../pgjdbc/Agent.java"),
            apt=("default-jdk-headless", "maven", "libjunixsocket-java"),
            build=(MAVEN_LIB, *_pgjdbc_build("lib/*")),
            run=(*JVM, ARCHIVED, "-cp", f"agent.jar:lib/*:{JUNIXSOCKET_JAR}", "Agent", "pgjdbc-maven"),
        ),
        protocols="the pgjdbc-maven agent asks pgjdbc for no protocol version but its 3.0",
        pipeline=_NO_PIPELINE.format("pgjdbc"),
    ),
    # Django's ORM (psycopg 3 backend): raw SQL through connection.cursor(), prepared by psycopg (_pg3_N) only
    # with OPTIONS server_side_binding and a prepare_threshold, both off by Django's default
    Shipped(
        AgentSpec(
            id="django",
            language="python",
            sources=("agent.py", *PYTHON_SHARED),
            apt=("python3-venv",),
            pip=("Django==5.2.19", "asgiref==3.13.0", "sqlparse==0.6.1", *_PSYCOPG),
            run=_VENV,
            preload=_VENV_PRELOAD,
            settings=(
                ("DISABLE_SERVER_SIDE_CURSORS", "false"),
                ("CONN_MAX_AGE", "0"),
                ("server_side_binding", "false"),
                ("prepare_threshold", "None"),
                ("options", ""),
            ),
        ),
        "name LIKE '\\_pg3\\_%'",
        ("options", "-c {name}={value}"),
        refusals=(("Django never prepares", "a Django client-side binding cursor, or psycopg with no "
                   "prepare_threshold, never prepares a statement: protocol-level prepares do not happen"),),
        protocols="the django agent passes psycopg no max_protocol_version (Django has no setting for it)",
        pipeline="Django has no public call that sends Parse and Close messages in one batch",
    ),
    # SQLAlchemy 2 over its psycopg 3 dialect: session.execute(text(sql)), prepared by psycopg's threshold (_pg3_N)
    Shipped(
        AgentSpec(
            id="sqlalchemy",
            language="python",
            sources=("agent.py", *PYTHON_SHARED),
            apt=("python3-venv",),
            pip=("SQLAlchemy==2.1.9", *_PSYCOPG),
            run=_VENV,
            preload=_VENV_PRELOAD,
            settings=(("pool_pre_ping", "false"), ("poolclass", "QueuePool"), ("prepare_threshold", "5"),
                      ("options", "")),
        ),
        "name LIKE '\\_pg3\\_%'",
        ("options", "-c {name}={value}"),
        protocols="the sqlalchemy agent passes psycopg no max_protocol_version (a dialect setting it leaves out)",
        pipeline="SQLAlchemy has no public call that sends Parse and Close messages in one batch",
    ),
    # Rails' ActiveRecord (Debian's 6.1) with its pg adapter: a bound query through its statement pool, a1, a2...
    Shipped(
        AgentSpec(
            id="activerecord",
            language="ruby",
            sources=("agent.rb", RUBY_PROTOCOL, "preload.rb"),
            apt=("ruby-activerecord", "ruby-pg", "ruby-bootsnap"),
            run=("ruby", "{dir}/agent.rb"),
            preload=("ruby", "{dir}/agent.rb", "--preload", "{fd}"),
            settings=(("prepared_statements", "true"), ("advisory_locks", "true"), ("options", "")),
        ),
        "name ~ '^a[0-9]+$'",
        ("options", "-c {name}={value}"),
        protocols=_LIBPQ_15.format("ActiveRecord's pg adapter"),
        pipeline=_NO_PIPELINE.format("ActiveRecord"),
    ),
    # Prisma ORM 7 (npm): PrismaClient over @prisma/adapter-pg (node-postgres), Prisma 7's only way to
    # PostgreSQL; it names statements only through a statementNameGenerator (prisma_<hash of the text> here)
    Shipped(
        AgentSpec(
            id="prisma",
            language="node",
            sources=("agent.js", "schema.prisma"),
            npm=("prisma@7", "@prisma/client@7", "@prisma/adapter-pg@7", "pg@8"),
            build=(("{dir}/node_modules/.bin/prisma", "generate", "--schema", "{dir}/schema.prisma"),),
            build_env=PRISMA_ENV,
            run=_NODE,
            settings=(("pgbouncer", "false"), ("statementNameGenerator", "none"), ("options", "")),
        ),
        "name ~ '^prisma_[0-9a-f]{16}$'",
        ("options", "-c {name}={value}"),
        protocols=_V3_ONLY.format("Prisma 7 over pg 8"),
        pipeline=_NO_PIPELINE.format("Prisma 7"),
    ),
    # Spring Boot 4 + Hibernate ORM 7 + HikariCP + pgjdbc (Maven Central: pom.xml names Spring Boot's parent,
    # which manages the others' versions). A Hibernate native query is a PreparedStatement pgjdbc names S_n
    # from its prepareThreshold-th run of the text; pgjdbc's Agent.java is compiled beside it (JSON, rows).
    # Like pgjdbc's, the agent keeps SCRAM's SaltedPassword per password, salt and rounds (RFC 5802 5.1): C1 has
    # no SHA-256 intrinsic, and every connect is still a full SCRAM login
    replace(
        _PGJDBC,
        spec=replace(
            _PGJDBC.spec,
            id="hibernate",
            sources=("pom.xml", "HibernateAgent.java", "../pgjdbc/Agent.java"),
            apt=("default-jdk-headless", "maven", "libjunixsocket-java"),
            build=(MAVEN_LIB,
                   ("javac", "-cp", "{dir}/lib/*", "-d", "{dir}/classes", "{dir}/Agent.java",
                    "{dir}/HibernateAgent.java"),
                   ("jar", "cf", "{dir}/agent.jar", "-C", "{dir}/classes", "."),
                   (*HIBERNATE_JAVA, ARCHIVE, "HibernateAgent", "--boot-and-exit")),
            build_timeout=900.0,  # a first resolve fetches about 40 MB of jars; javac took 40 s on 2 busy cores
            run=(*HIBERNATE_JAVA, ARCHIVED, "HibernateAgent"),
        ),
        protocols="the hibernate agent asks pgjdbc for no protocol version but its 3.0",
        pipeline=_NO_PIPELINE.format("Hibernate"),
        # Each lane's A, B and C are JVMs of their own (A's and B's boot Spring): on 2 cores, the default matrix
        # took 56 s with 4 lanes, 56 s with 6 and 75 s with 8 (pytest's CPU 74, 86 and 106 s; 2026-12-06)
        lanes_per_core=2,
    ),
)


def shipped(driver_id: str) -> Shipped | None:
    """The catalogue's entry for a driver id, or None (psycopg, asyncpg and unknown ids)."""
    return next((s for s in CATALOGUE if s.spec.id == driver_id), None)


def known_drivers() -> tuple[str, ...]:
    """Every driver id --drivers takes: this process's own, then the agents'."""
    return (*(d.value for d in NATIVE_DRIVERS), *(s.spec.id for s in CATALOGUE))
