"""The options of the leak matrix: each a CLI flag and an ini key with one help text (and its default).

The pytest plugin registers them (`add_options`); `leakcheck run` and `leakcheck discover` build
their command-line options from the same table, so every entry point speaks the same language.
"""

from __future__ import annotations

import pytest

DEFAULT_PG = "16,17,18"
DEFAULT_BOUNCER = "1.26"

# (flag, ini key, help, default)
OPTIONS: tuple[tuple[str, str, str, str | None], ...] = (
    ("--pg", "leakcheck_pg", f"PostgreSQL versions or bin dirs, comma separated (default {DEFAULT_PG} "
     "when --bouncer is given); giving --pg or --bouncer turns the leak matrix on", None),
    ("--bouncer", "leakcheck_bouncer", f"PgBouncer versions or binaries, comma separated (default "
     f"{DEFAULT_BOUNCER} when --pg is given)", None),
    ("--matrix", "leakcheck_matrix", "a matrix file (TOML) naming what you run: PostgreSQL versions, poolers with "
     "their settings and ini, drivers, probes, the baseline and the policy; options given here win over it", None),
    ("--diff", "leakcheck_diff", "print what changes from one cell to another at the end of the run, "
     "FROM..TO, e.g. pg16/pgbouncer1.24..pg18/pgbouncer1.26 (alone, it runs just those two cells; with a matrix, both "
     "must be in it)", None),
    ("--pooler", "leakcheck_pooler", "poolers as KIND:VERSION, comma separated: pgbouncer, odyssey or pgpool, e.g. "
     "odyssey:1.5,pgbouncer:1.26 (--bouncer=V is pgbouncer:V); a version or a path to the binary", None),
    ("--bouncer-fleet", "leakcheck_bouncer_fleet", "run each PgBouncer as a fleet on one port (so_reuseport): N "
     "processes of each --bouncer release (2 to 4, e.g. 2), or one process per release given for a rolling upgrade "
     "(e.g. 1.24,1.26: each order is a cell); --bouncer-set peering=yes,no links them with peer_id and [peers]; native "
     "backend only", None),
    ("--bouncer-ini", "leakcheck_bouncer_ini", "your own pgbouncer.ini: every setting kept except what leakcheck must "
     "control (listen address and port, the database entry, pool size, auth, log/pid/socket paths; listed in the "
     "run header); a key a team may not set is refused (docs/poolers.md)", None),
    ("--pooled-dsn", "leakcheck_pooled_dsn", "measure a pooler that is already running (staging PgBouncer, "
     "Odyssey, PgCat, RDS Proxy...): a postgresql:// URI through it; nothing is started", None),
    ("--direct-dsn", "leakcheck_direct_dsn", "with --pooled-dsn (required): a postgresql:// URI straight to its "
     "PostgreSQL, for leakcheck's own session there (the proof of which server connection each client had) and the "
     "direct and shared controls", None),
    ("--dsn-name", "leakcheck_dsn_name", "with --pooled-dsn: the pooler's name in test ids and gate keys "
     "(default: its host and port)", None),
    ("--drivers", "leakcheck_drivers", "drivers to run: psycopg, asyncpg, the shipped agents node-postgres, "
     "postgres-js, pgjdbc, pgjdbc-maven, pdo, ruby-pg, pgx, pgx-v5, sqlx, tokio-postgres, the ORMs django, "
     "sqlalchemy, activerecord, prisma, hibernate, or cmd:PATH, a team's own agent (docs/agent-protocol.md) "
     "(default psycopg,asyncpg; none when --pairs is given without it)", "psycopg,asyncpg"),
    ("--pairs", "leakcheck_pairs", "mixed applications on one pool, A+B, comma separated: A's driver and B's, each "
     "as --drivers names it with its own settings in brackets, one value each, e.g. pgjdbc+psycopg,"
     "prisma[pgbouncer=true]+node-postgres (docs/drivers.md: mixed applications)", None),
    ("--probes", "leakcheck_probes", "probe ids to run, comma separated (default all)", "all"),
    ("--controls", "leakcheck_controls", "also run every probe on the direct and session-mode controls: "
     "yes or no (default yes); --record and --update write only verdicts whose controls passed, so they need yes",
     "yes"),
    ("--backend", "leakcheck_backend", "where servers come from: native, containers, or auto (containers when "
     "a Docker engine answers, else native); default native", "native"),
    ("--expect", "leakcheck_expect", "a baseline of expected verdicts (matrices/*.toml, or the older *.json): a "
     "probe passes when its verdict matches, fails when it differs (the pre-upgrade gate)", None),
    ("--require", "leakcheck_require", "the probes your application relies on, comma separated (or security: "
     "every security probe): they must be isolated for the gate to pass; other problems fail only as "
     "differences from --expect (without it, they are accepted)", None),
    ("--record", "leakcheck_record", "write the measured verdicts to this baseline file (.toml: format 2, with "
     "reasons; .json: format 1)", None),
    ("--results", "leakcheck_results", "write every outcome of the run (leak tests and controls, with their "
     "evidence and advice) to this JSON file, for `leakcheck merge` (schema leakcheck-results, version 2)", None),
    ("--report-html", "leakcheck_report_html", "write a self-contained HTML report (the matrix in colour, "
     "filters, each cell's evidence and advice) to this file at the end of the run", None),
    ("--report-md", "leakcheck_report_md", "write a Markdown report that fits a pull-request comment (tables, then "
     "each problem cell's evidence and advice folded) to this file at the end of the run", None),
    ("--jobs", "leakcheck_jobs", "how many independent cells (lanes) run at the same time: a number from 1 "
     "to 64, or auto (six per core, at most 12; four per core, at most 8, where agents run, two for pgjdbc's "
     "and hibernate's JVMs); default auto", "auto"),
    ("--pg-image", "leakcheck_pg_image", "containers backend: PostgreSQL image template "
     "(default postgres:{version})", "postgres:{version}"),
    ("--bouncer-image", "leakcheck_bouncer_image", "containers backend: a PgBouncer image template to use "
     "instead of building leakcheck's own (e.g. registry/pgbouncer:{version})", None),
    ("--odyssey-image", "leakcheck_odyssey_image", "containers backend: the Odyssey image template, needed for "
     "--pooler=odyssey:V (e.g. registry/odyssey:{version}; docker/odyssey builds one)", None),
    ("--pgpool-image", "leakcheck_pgpool_image", "containers backend: the pgpool-II image template, needed for "
     "--pooler=pgpool:V (e.g. registry/pgpool:{version}; docker/pgpool builds one)", None),
)


#: Options given any number of times (each a matrix axis); ini keys take one per line. (flag, ini key, help)
LIST_OPTIONS: tuple[tuple[str, str, str], ...] = (
    ("--bouncer-set", "leakcheck_bouncer_set", "a PgBouncer setting as a matrix axis, NAME=V1,V2 (repeatable; "
     "values are crossed; quote a value holding a comma), e.g. max_prepared_statements=0,200; one a team may set "
     "(docs/poolers.md)"),
    ("--pooler-set", "leakcheck_pooler_set", "a setting of any pooler as a matrix axis, KIND:NAME=V1,V2 "
     "(repeatable), e.g. odyssey:pool_reserve_prepared_statement=yes,no; one a team may set (docs/poolers.md)"),
    ("--driver-set", "leakcheck_driver_set", "a driver setting as a matrix axis, DRIVER:NAME=V1,V2 (repeatable; "
     "crossed; the driver's defaults are not written in ids), e.g. pgjdbc:prepareThreshold=0,5 or "
     "psycopg:prepare_threshold=None,5"),
)


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("leakcheck", "leakcheck: session state leaks through connection poolers")
    for flag, ini, help_text, _ in OPTIONS:
        group.addoption(flag, dest=ini, default=None, help=help_text)
        parser.addini(ini, help=help_text, default=None)
    for flag, ini, help_text in LIST_OPTIONS:
        group.addoption(flag, dest=ini, default=None, action="append", help=help_text)
        parser.addini(ini, help=help_text, type="linelist", default=None)
    for flag, ini, help_text in FLAG_OPTIONS:
        group.addoption(flag, dest=ini, default=None, action="store_const", const="yes", help=help_text)
        parser.addini(ini, help=f"{help_text} (yes or no)", default=None)


#: Options that take no value. (flag, ini key, help); the ini key takes yes or no.
FLAG_OPTIONS: tuple[tuple[str, str, str], ...] = (
    ("--update", "leakcheck_update", "rewrite the --expect baseline with this run's verdicts (reasons kept while "
     "a verdict stays the same); differences are recorded instead of failing"),
)

FLAGS = ({ini: flag for flag, ini, _, _ in OPTIONS} | {ini: flag for flag, ini, _ in LIST_OPTIONS}
         | {ini: flag for flag, ini, _ in FLAG_OPTIONS})
DEFAULTS = {ini: default for _, ini, _, default in OPTIONS}
#: The options that turn the leak matrix on.
MATRIX_SWITCHES = ("leakcheck_pg", "leakcheck_bouncer", "leakcheck_pooler", "leakcheck_pooled_dsn", "leakcheck_matrix",
                   "leakcheck_diff")
