"""`leakcheck prepare`: resolve, fetch and build the servers a matrix needs, ahead of time.

The matrix itself runs under pytest (`pytest --pg=16,18 --bouncer=1.24,1.26`).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import NoReturn

from . import preflight, signals
from .config import DEFAULT_BOUNCER, DEFAULT_PG, Config
from .errors import LeakcheckError
from .lab import make_backend

EXIT_USAGE = 4  # as pytest's (and the plugin's): a value that cannot be understood or obtained


class _Parser(argparse.ArgumentParser):
    """argparse, except that a usage error is one line and exit code 4, as in the pytest plugin."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"leakcheck: error: {message}; see `{self.prog} --help`\n")


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="leakcheck", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    prepare = sub.add_parser("prepare", help="fetch/build and cache PostgreSQL and PgBouncer binaries")
    prepare.add_argument("--pg", default=DEFAULT_PG, help=f"PostgreSQL versions (default {DEFAULT_PG})")
    prepare.add_argument("--bouncer", default=DEFAULT_BOUNCER, help=f"PgBouncer versions (default {DEFAULT_BOUNCER})")
    prepare.add_argument("--backend", default="native", help="native or containers (default native)")
    args = parser.parse_args(argv)
    restore = signals.install()  # SIGTERM, SIGHUP and SIGQUIT clean up like Ctrl-C
    try:
        config = Config.from_strings({
            "leakcheck_pg": args.pg, "leakcheck_bouncer": args.bouncer, "leakcheck_backend": args.backend,
            "leakcheck_drivers": "psycopg,asyncpg", "leakcheck_probes": "all", "leakcheck_controls": "no",
            "leakcheck_pg_image": "postgres:{version}",
        })
        preflight.check_environment(os.environ)  # LEAKCHECK_* variables, before anything is fetched
        preflight.check_temp_folder(os.environ, 0)
        with make_backend(config, progress=lambda m: print(f"leakcheck: {m}", file=sys.stderr)) as backend:
            for spec in config.pg:
                print(f"--pg {spec} -> PostgreSQL {backend.resolve_pg(spec)}")
            for spec in config.bouncer:
                print(f"--bouncer {spec} -> PgBouncer {backend.resolve_bouncer(spec)}")
            for line in backend.describe():
                print(f"  {line}")
    except LeakcheckError as exc:
        print(f"leakcheck: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("leakcheck: interrupted", file=sys.stderr)
        return 130
    finally:
        restore()
    return 0


if __name__ == "__main__":
    sys.exit(main())
