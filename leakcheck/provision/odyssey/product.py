"""Odyssey as one product: where it comes from (Debian's odyssey package), its process, its settings."""

from __future__ import annotations

from pathlib import Path

from leakcheck.model.products import ODYSSEY
from leakcheck.model.versions import Spec
from leakcheck.provision.base import Binary
from leakcheck.provision.odyssey import conf
from leakcheck.provision.odyssey.process import OdysseyProcess
from leakcheck.provision.product import PoolerProduct, Running, Start
from leakcheck.provision.sources import programs
from leakcheck.provision.sources.packaged import resolve_packaged


def resolve_odyssey(spec: Spec, cache: Path, option: str = "--odyssey") -> Binary:
    """An odyssey of the version `spec` asks for (1.5 -> 1.5.2), or at its path."""
    return resolve_packaged(programs.ODYSSEY, spec, cache, option)


def _process(start: Start) -> Running:
    """Odyssey reaches PostgreSQL over TCP."""
    return OdysseyProcess(start.binaries[0], start.settings, start.pooler.settings, start.postgres.endpoint(),
                          start.user)


PRODUCT = PoolerProduct(ODYSSEY, resolve_odyssey, _process, conf.TEAM, written_as=conf.value_of)
