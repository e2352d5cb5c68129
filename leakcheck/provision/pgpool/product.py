"""pgpool-II as one product: where it comes from (Debian's pgpool2 package), its process, what a team may set.
On the containers backend: provision/containers/odyssey_pgpool.py."""

from __future__ import annotations

from leakcheck.model.products import PGPOOL
from leakcheck.provision.pgpool import conf
from leakcheck.provision.pgpool.process import PgpoolProcess
from leakcheck.provision.product import PoolerProduct, over_tcp
from leakcheck.provision.sources import programs
from leakcheck.provision.sources.packaged import Packaged

#: A pgpool of the version a spec asks for (4.3 -> 4.3.5), or at its path.
resolve_pgpool = Packaged(programs.PGPOOL, "--pgpool")

PRODUCT = PoolerProduct(PGPOOL, resolve_pgpool, over_tcp(PgpoolProcess), conf.TEAM, written_as=conf.value_of)
