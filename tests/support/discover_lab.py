"""A discovery lab on the tests' shared native backend: PostgreSQL 16, and one PgBouncer (none on the direct route)."""

from __future__ import annotations

from leakcheck.discover import lab
from leakcheck.model.target import Pooler, PoolerKind, Route
from leakcheck.model.versions import parse_spec
from leakcheck.provision.native import NativeBackend


def discover_lab(native: NativeBackend, route: Route, bouncer: str) -> lab.Lab:
    pg = native.resolve_pg(parse_spec("16", "--pg"))
    pooler = None if route is Route.DIRECT else Pooler(PoolerKind.PGBOUNCER, native.resolve_pooler(
        PoolerKind.PGBOUNCER, parse_spec(bouncer, "--bouncer")))
    return lab.at(native, pg, pooler, route)
