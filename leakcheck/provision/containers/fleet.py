"""A PgBouncer fleet on the containers backend (`--bouncer-fleet` with `--backend=containers`).

One container per process, each from its release's image (a rolling upgrade mixes two), all in the
first one's network namespace (`--network container:<first>`): they share its port 6432
(`so_reuseport = 1`) and the one port published on 127.0.0.1, as the native fleet shares a port of
127.0.0.1. Each process also listens on its own Unix socket, in a folder of the host bind-mounted into
every container (FLEET_DIR/mN): a probe reaches one process there, and peers (`--bouncer-set
peering=yes`) name each other by those sockets, as in the native fleet (provision/pgbouncer/fleet.py).
The sockets cross from a container to the host, so the engine must run on this machine's kernel.

Used like one pooler: entering starts every container (all created, then each waited for), leaving
removes every one and the folder, whatever happened; a member whose container stopped makes every
later use fail naming it (`lost()`).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Self

from testcontainers.core.container import DockerContainer
from testcontainers.core.network import Network

from leakcheck.model.axes import PEERING
from leakcheck.model.errors import StartError, one_line
from leakcheck.model.pool_settings import PoolSettings
from leakcheck.model.target import Setting
from leakcheck.model.versions import Version
from leakcheck.provision.base import Endpoint
from leakcheck.provision.containers import images as img
from leakcheck.provision.containers.engine import LOOPBACK, Engine
from leakcheck.provision.pgbouncer.admin import check_config, reset_pool, show_version
from leakcheck.provision.pgbouncer.ini import BouncerLayout, harness_values
from leakcheck.provision.pgbouncer.team_ini import TeamIni

#: Where every member's container sees the fleet's host folder (member N's socket in FLEET_DIR/mN).
FLEET_DIR = "/leakcheck-fleet"


@dataclass(frozen=True)
class MemberImage:
    """The image one process of the fleet runs: its name, exact release, and user when not the image's."""

    name: str
    version: Version
    user: str | None = None


class ContainerFleet:
    """One PgBouncer container per image (in the fleet's order), sharing the first one's port."""

    def __init__(
        self, engine: Engine, images: tuple[MemberImage, ...], settings: PoolSettings, extra: tuple[Setting, ...],
        team: TeamIni | None, credentials: tuple[tuple[str, str], ...], network: Network, name: str, timeout: float,
    ) -> None:
        self.engine, self.images, self.settings, self.timeout = engine, images, settings, timeout
        self.extra, self.team, self.credentials, self.network, self.name = extra, team, credentials, network, name
        self.peering = dict(extra).get(PEERING) == "yes"
        self.folder: Path | None = None
        self.containers: list[DockerContainer] = []
        self.port = 0

    def __enter__(self) -> Self:
        try:
            self.folder = Path(tempfile.mkdtemp(prefix=f"leakcheck-fleet-{self.engine.run_id}-"))
            self.folder.chmod(0o755)
            for i, image in enumerate(self.images):
                self._start(i, image)
            for i in range(len(self.images)):
                self._wait(i)
        except BaseException:
            self.__exit__()
            raise
        return self

    def _layout(self, i: int) -> BouncerLayout:
        peers = tuple((j + 1, f"{FLEET_DIR}/m{j + 1}") for j in range(len(self.images)) if j != i)
        return replace(img.bouncer_layout(), unix_socket_dir=f"{FLEET_DIR}/m{i + 1}", so_reuseport=True,
                       peer_id=i + 1 if self.peering else 0, peers=peers if self.peering else ())

    def _start(self, i: int, image: MemberImage) -> None:
        assert self.folder is not None
        own = self.folder / f"m{i + 1}"
        own.mkdir()
        own.chmod(0o777)  # the image's own user (pgbouncer) makes its socket there
        kwargs: dict[str, Any] = {"labels": dict(self.engine.labels), "entrypoint": ["pgbouncer"]}
        if image.user:
            kwargs["user"] = image.user
        if i:  # the first member's network namespace: its port, its network, its published port
            kwargs["network_mode"] = f"container:{self.name}-1"
        container = (
            DockerContainer(image.name).with_name(f"{self.name}-{i + 1}")
            .with_command([f"{img.CONFIG_DIR}/pgbouncer.ini"])
            .with_volume_mapping(str(self.folder), FLEET_DIR, "rw").with_kwargs(**kwargs)
        )
        if not i:
            container.with_network(self.network)
        axes = tuple((k, v) for k, v in self.extra if k != PEERING)  # leakcheck's meta-setting, not PgBouncer's
        for path, data in img.bouncer_files(self.settings, self.credentials, axes, self.team, self._layout(i)).items():
            container.with_copy_into_container(data, path, 0o644)
        self.containers.append(container)
        if i:
            self.engine.start(container, self.describe(i))
        else:
            self.port = self.engine.start_published(container, self.describe(i), img.BOUNCER_PORT)

    def _wait(self, i: int) -> None:
        member = self.member(i)

        def ready() -> str | None:
            try:
                show_version(member)
                return None
            except Exception as exc:  # noqa: BLE001 - not ready yet: the reason, until the deadline
                return one_line(exc, 160)

        self.engine.wait_ready(self.containers[i], self.describe(i), ready, self.timeout)
        check_config(member, harness_values(self.settings, self._layout(i)),
                     f"{img.CONFIG_DIR}/pgbouncer.ini in {self.describe(i)}")

    def __exit__(self, *exc: object) -> None:
        containers, self.containers = self.containers, []
        try:
            for container in reversed(containers):  # the namespace's owner last
                with contextlib.suppress(Exception):
                    self.engine.remove(container)
        finally:
            if self.folder is not None:
                shutil.rmtree(self.folder, ignore_errors=True)
                self.folder = None

    def member(self, i: int) -> Endpoint:
        """Process i+1 at its own Unix socket (in the host folder), on the port the fleet shares inside."""
        assert self.folder is not None
        return Endpoint(str(self.folder / f"m{i + 1}"), img.BOUNCER_PORT, credentials=self.credentials)

    def describe(self, i: int) -> str:
        image = self.images[i]
        return f"process {i + 1} of the fleet (PgBouncer {image.version}, {image.name}, container {self.name}-{i + 1})"

    def lost(self) -> str | None:
        """None while every container runs; else which stopped, with the end of its log."""
        for i, container in enumerate(self.containers):
            status, code = self.engine.state(container)
            if status != "running":
                tail = "\n".join(self.engine.logs(container).strip().splitlines()[-10:])
                return (f"{self.describe(i)} is {status} (exit code {code}): the fleet lost a process; "
                        f"its log ends:\n{tail}")
        return None

    def reset(self) -> None:
        """Every member closes its server connections (KILL/RESUME on its own console)."""
        for i in range(len(self.containers)):
            try:
                reset_pool(self.member(i))
            except StartError as exc:
                raise StartError(f"{self.describe(i)}: {exc}") from None

    def endpoint(self) -> Endpoint:
        """The shared port published on 127.0.0.1, and each process at its own socket (`members`)."""
        return Endpoint(LOOPBACK, self.port, credentials=self.credentials,
                        members=tuple(self.member(i) for i in range(len(self.containers))))
