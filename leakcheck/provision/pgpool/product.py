"""pgpool-II as one product: where it comes from (Debian's pgpool2 package), its process, its settings."""

from __future__ import annotations

from pathlib import Path

from leakcheck.model.products import PGPOOL
from leakcheck.model.versions import Spec
from leakcheck.provision.base import Binary
from leakcheck.provision.pgpool import conf
from leakcheck.provision.pgpool.process import PgpoolProcess
from leakcheck.provision.product import PoolerProduct, Running, Start
from leakcheck.provision.sources import programs
from leakcheck.provision.sources.packaged import resolve_packaged


def resolve_pgpool(spec: Spec, cache: Path, option: str = "--pgpool") -> Binary:
    """A pgpool of the version `spec` asks for (4.3 -> 4.3.5), or at its path."""
    return resolve_packaged(programs.PGPOOL, spec, cache, option)


def _process(start: Start) -> Running:
    """pgpool-II reaches PostgreSQL over TCP."""
    return PgpoolProcess(start.binaries[0], start.settings, start.pooler.settings, start.postgres.endpoint(),
                         start.user)


PRODUCT = PoolerProduct(PGPOOL, resolve_pgpool, _process, conf.TEAM, written_as=conf.value_of)
