"""A PgBouncer fleet (--bouncer-fleet): several PgBouncer processes on one 127.0.0.1 port
(`so_reuseport = 1`), each also at its own Unix socket in its own folder, so a probe chooses which
process a connection lands on; with peering (`--bouncer-set peering=yes`) each has a `peer_id` and a
`[peers]` section naming the others by their sockets, as PgBouncer's own test_peering does.

The fleet is used like one pooler process (native.py): entering starts every process (all spawned,
then each waited for), leaving stops every one, whatever happened. A process of the fleet that ended
makes every later use fail naming it (`lost()`).
"""

from __future__ import annotations

from leakcheck.model.axes import PEERING
from leakcheck.model.errors import StartError
from leakcheck.model.pool_settings import PoolSettings
from leakcheck.model.target import Setting
from leakcheck.provision.base import Binary, Endpoint
from leakcheck.provision.host.pooler_process import NOT_RUNNING, SpawnThenFinish
from leakcheck.provision.host.process import STOPPED
from leakcheck.provision.host.system import ServerUser, free_port
from leakcheck.provision.pgbouncer.process import BouncerProcess
from leakcheck.provision.pgbouncer.team_ini import TeamIni


class BouncerFleet(SpawnThenFinish):
    """One PgBouncer process per binary (in the fleet's order), sharing one port."""

    def __init__(
        self, binaries: tuple[Binary, ...], settings: PoolSettings, server: Endpoint, user: ServerUser,
        extra: tuple[Setting, ...] = (), team: TeamIni | None = None,
    ) -> None:
        self.settings = settings
        self.members = [BouncerProcess(b, settings, server, user, extra, team) for b in binaries]
        self.peering = dict(extra).get(PEERING) == "yes"
        self.port = 0

    def spawn(self) -> None:
        """Every member's folder first (peers name each other's sockets), then every process, not yet waited for."""
        folders = [m.make_dir() for m in self.members]
        for i, member in enumerate(self.members, start=1):
            member.in_fleet = True
            if self.peering:
                member.peer_id = i
                member.peers = tuple((j, str(f)) for j, f in enumerate(folders, start=1) if j != i)
        self.port = free_port()
        for member in self.members:
            member.spawn(self.port)

    def finish(self) -> None:
        """Each member answers on its own socket and shows leakcheck's settings; all still share the port."""
        for member in self.members:
            member.finish()
        moved = [f"{self.describe(i)} on port {m.port}" for i, m in enumerate(self.members) if m.port != self.port]
        if moved:
            raise StartError(f"the PgBouncer fleet on port {self.port} could not keep its port: {', '.join(moved)} "
                             "(another program took it during the start); run again")

    def __exit__(self, *exc: object) -> None:
        errors: list[BaseException] = []
        for member in self.members:
            try:
                member.__exit__()
            except BaseException as error:  # noqa: BLE001 - every member is stopped, the first error re-raised
                errors.append(error)
        if errors:
            raise errors[0]

    def describe(self, index: int) -> str:
        """`process 2 of the fleet, PgBouncer 1.26.1 (/path/to/pgbouncer)`: the program named once."""
        return f"process {index + 1} of the fleet, {self.members[index].what}"

    def _named(self, index: int, said: object) -> str:
        """`said` about process `index`, which names it once (a member's own error already names its program)."""
        text = str(said)
        return f"process {index + 1} of the fleet: {text}" if self.members[index].what in text else \
            f"{self.describe(index)}: {text}"

    def lost(self) -> str | None:
        """None while every process runs; else which ended (with the end of its log) or is stopped."""
        for i, member in enumerate(self.members):
            how = member.ended()
            if how == STOPPED:
                return f"{self.describe(i)}: {how} (the fleet lost a process)"
            if how is not None:
                why = "" if how == NOT_RUNNING else f" ({how})"
                tail = "\n".join(member.log_text().strip().splitlines()[-10:])
                ends = f"; its log ends:\n{tail}" if tail else ""
                return f"{self.describe(i)} is not running{why}: the fleet lost a process{ends}"
        return None

    def running(self) -> bool:
        return self.lost() is None

    def log_text(self) -> str:
        return "\n".join(f"--- {self.describe(i)}\n{m.log_text()}" for i, m in enumerate(self.members))

    def reset(self) -> None:
        """Every member closes its server connections (KILL/RESUME on its own console); a member that
        cannot is named (it may have just ended: the fleet lost a process)."""
        for i, member in enumerate(self.members):
            try:
                member.reset()
            except StartError as exc:
                raise StartError(self._named(i, exc)) from None

    def endpoint(self) -> Endpoint:
        """The shared port on 127.0.0.1, and each process at its own socket (`members`)."""
        first = self.members[0].endpoint()
        return Endpoint("127.0.0.1", self.port, credentials=first.credentials,
                        members=tuple(m.endpoint() for m in self.members))
