"""What a pooler product does, beside what it is (model/products.py): how its binary is found, its
process made, what a team may set in it, what its own console can tell. One `PoolerProduct` per
product folder (`provision/<product>/product.py`), registered in provision/products.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from leakcheck.model.pool_settings import PoolSettings
from leakcheck.model.products import Product
from leakcheck.model.target import Pooler, PoolerKind, Setting
from leakcheck.model.team_settings import TeamSettings
from leakcheck.model.versions import Spec
from leakcheck.provision.base import Binary, Endpoint
from leakcheck.provision.host.pooler_process import PoolerProcess
from leakcheck.provision.host.proc_sockets import Ends
from leakcheck.provision.host.system import ServerUser
from leakcheck.provision.pgbouncer.fleet import BouncerFleet
from leakcheck.provision.postgres.server import PgServer

#: A pooler process, or a PgBouncer fleet used as one.
Running = PoolerProcess | BouncerFleet


@dataclass(frozen=True)
class Start:
    """What the native backend hands a product to make its process (not started): its binaries (a fleet's
    several, in process order; else one), the pool settings, the cell's pooler, the PostgreSQL behind it."""

    binaries: tuple[Binary, ...]
    settings: PoolSettings
    pooler: Pooler
    postgres: PgServer
    user: ServerUser


def over_tcp(process: Callable[[Binary, PoolSettings, tuple[Setting, ...], Endpoint, ServerUser], PoolerProcess],
             ) -> Callable[[Start], Running]:
    """A product whose one process reaches PostgreSQL over TCP (Odyssey, pgpool-II), made from its binary, the
    pool settings, the cell's settings, PostgreSQL's endpoint and the server user."""
    def make(start: Start) -> Running:
        return process(start.binaries[0], start.settings, start.pooler.settings, start.postgres.endpoint(), start.user)
    return make


@dataclass(frozen=True)
class PoolerProduct:
    """One product's behaviour (its policies are `record`'s)."""

    record: Product
    #: its binary of the version `spec` asks for (or at its path), from the cache (the Path), for `option`
    resolve: Callable[[Spec, Path, str], Binary]
    #: its process, not started (native backend)
    process: Callable[[Start], Running]
    #: what a team may set (--pooler-set, a matrix file's settings): its allow-list
    team: TeamSettings
    #: how its config file writes a value (a UsageError for one it cannot hold as it is); None: any one line
    written_as: Callable[[str], str] | None = None
    #: a team's own config file's value of a setting (--bouncer-ini: path, name), None when it sets none
    team_value: Callable[[str, str], str | None] | None = None
    #: how many cancel requests it still forwards (None when it cannot say) and who tells (`PgBouncer's SHOW
    #: POOLS`, as evidence reads it); None: nothing tells, a probe waits its bound
    cancels_in_flight: tuple[Callable[[Endpoint], int | None], str] | None = None
    #: its console's word, made once per probe for the pooler at the endpoint (its settings read once), that it
    #: keeps these server connections (PostgreSQL pids) for a client while the waiting client (its TCP
    #: connections) waits in a full pool, with no timer of its own ending that within the bound (seconds): in
    #: words, else None; None: it cannot tell, a waiting client is known stalled at its bound
    kept_for: Callable[[Endpoint], Callable[[set[int], float, set[Ends]], str | None]] | None = None

    @property
    def kind(self) -> PoolerKind:
        return PoolerKind(self.record.key)
