"""The agents of pgjdbc, PHP PDO, ruby-pg and pgx: how each is installed, built and started.

Each agent is one file of its own language in leakcheck/agents/<id>/, speaking the agent protocol
(docs/agent-protocol.md). pgx v5 and Npgsql are not shipped: they need a Go module proxy and NuGet,
which this project's machines do not reach.
"""

from __future__ import annotations

from .spec import AgentSpec

#: Debian's pgjdbc jar (libpostgresql-jdbc-java)
PGJDBC_JAR = "/usr/share/java/postgresql.jar"

#: pgx's release is not introspectable in GOPATH mode: read from dpkg at build time, linked in.
PGX_BUILD = (
    "sh", "-c",
    'cd "$1" && GOPATH=/usr/share/gocode GO111MODULE=off GOCACHE="$1/.gocache" '
    'go build -o agent -ldflags "-X main.release=$(dpkg-query -W -f=\'${source:Upstream-Version}\' '
    'golang-github-jackc-pgx-v4-dev)" main.go && rm -rf "$1/.gocache"',
    "sh", "{dir}",
)

SPECS: tuple[AgentSpec, ...] = (
    AgentSpec(
        id="pgjdbc",
        language="java",
        sources=("Agent.java",),
        apt=("libpostgresql-jdbc-java",),
        build=(("javac", "-cp", PGJDBC_JAR, "-d", "{dir}", "{dir}/Agent.java"),),
        run=("java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", "{dir}:" + PGJDBC_JAR, "Agent"),
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
    ),
    AgentSpec(
        id="pdo",
        language="php",
        sources=("agent.php",),
        apt=("php8.2-cli", "php8.2-pgsql"),
        run=("php", "{dir}/agent.php"),
        settings=(("ATTR_EMULATE_PREPARES", "false"), ("PGSQL_ATTR_DISABLE_PREPARES", "false")),
    ),
    AgentSpec(
        id="ruby-pg",
        language="ruby",
        sources=("agent.rb",),
        apt=("ruby-pg",),
        run=("ruby", "{dir}/agent.rb"),
        settings=(("options", ""), ("application_name", "")),
    ),
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
)
