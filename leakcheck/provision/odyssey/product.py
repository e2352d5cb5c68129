"""Odyssey as one product: where it comes from (Debian's odyssey package), its process, what a team may set.
On the containers backend: provision/containers/odyssey_pgpool.py."""

from __future__ import annotations

from leakcheck.model.products import ODYSSEY
from leakcheck.provision.odyssey import conf
from leakcheck.provision.odyssey.process import OdysseyProcess
from leakcheck.provision.product import PoolerProduct, over_tcp
from leakcheck.provision.sources import programs
from leakcheck.provision.sources.packaged import Packaged

#: An odyssey of the version a spec asks for (1.5 -> 1.5.2), or at its path.
resolve_odyssey = Packaged(programs.ODYSSEY, "--odyssey")

PRODUCT = PoolerProduct(ODYSSEY, resolve_odyssey, over_tcp(OdysseyProcess), conf.TEAM, written_as=conf.value_of)
