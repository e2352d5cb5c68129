"""PgBouncer as one product: its releases (cache, npm, Debian, tarballs, builds), its process or a fleet of
them, its settings, a team's ini, what its admin console tells."""

from __future__ import annotations

from pathlib import Path

from leakcheck.model.products import PGBOUNCER
from leakcheck.model.versions import Spec
from leakcheck.provision.base import Binary
from leakcheck.provision.pgbouncer import admin, settings, team_ini
from leakcheck.provision.pgbouncer.binaries import resolve_bouncer
from leakcheck.provision.pgbouncer.fleet import BouncerFleet
from leakcheck.provision.pgbouncer.process import BouncerProcess
from leakcheck.provision.product import PoolerProduct, Running, Start


def _resolve(spec: Spec, cache: Path, option: str) -> Binary:
    return resolve_bouncer(spec, cache)


def _process(start: Start) -> Running:
    """PgBouncer reaches PostgreSQL on its Unix socket (PgServer.socket_endpoint); a fleet is several processes."""
    pooler = start.pooler
    team = team_ini.load(pooler.config) if pooler.config else None
    socket = start.postgres.socket_endpoint()
    if pooler.fleet:
        return BouncerFleet(start.binaries, start.settings, socket, start.user, pooler.settings, team)
    return BouncerProcess(start.binaries[0], start.settings, socket, start.user, pooler.settings, team)


def _team_value(path: str, name: str) -> str | None:
    return team_ini.load(path).value(name)


PRODUCT = PoolerProduct(PGBOUNCER, _resolve, _process, settings.TEAM, team_value=_team_value,
                        cancels_in_flight=(admin.cancels_until_closed, "PgBouncer's SHOW POOLS"),
                        kept_for=admin.KeptWatch)
