"""Odyssey and pgpool-II on the containers backend: their images, and one container per (PostgreSQL,
pooler, pool settings, lane), ready and reset with the same checks as the native processes.

The images come from the templates `--odyssey-image` and `--pgpool-image` (docker/odyssey and
docker/pgpool build them from Debian's packages; leakcheck does not build them itself). The exact
version is the one the image's program prints (`odyssey --version`; `pgpool --version`, on stderr).
A container joins its PostgreSQL's network, gets its files from odyssey_pgpool_files (rendered by the
native backend's functions) and publishes port 6432 on 127.0.0.1.

- Odyssey: ready when its console answers SHOW VERSION. Its console cannot close server
  connections, so a reset is `docker restart -t 0`; the published port is then read again (Docker
  may pick another) and readiness waited for.
- pgpool-II: ready when `PGPOOL SHOW port` answers 6432; then `PGPOOL SHOW <name>` for each extra
  setting (a refusal is the start error). A reset `docker exec`s odyssey_pgpool_files' reset command:
  the idle connection children of PID 1 get SIGKILL and pgpool-II forks as many new ones.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

from testcontainers.core.container import DockerContainer
from testcontainers.core.network import Network

from leakcheck.model.errors import ProvisionError, StartError, one_line
from leakcheck.model.pool_settings import PoolSettings
from leakcheck.model.target import PoolerKind, Setting
from leakcheck.model.versions import Version
from leakcheck.provision.base import Endpoint
from leakcheck.provision.containers import images as img
from leakcheck.provision.containers import odyssey_pgpool_files as pc
from leakcheck.provision.containers.engine import LOOPBACK, Engine
from leakcheck.provision.odyssey import conf as odyssey_conf
from leakcheck.provision.odyssey.process import console_answers
from leakcheck.provision.pgpool import conf as pgpool_conf
from leakcheck.provision.pgpool.process import answers_port, children, refused_setting
from leakcheck.provision.sources import banners
from leakcheck.provision.sources.programs import ODYSSEY, PGPOOL, Program

#: The program of each pooler kind this module starts.
PROGRAMS = {PoolerKind.ODYSSEY: ODYSSEY, PoolerKind.PGPOOL: PGPOOL}


@dataclass(frozen=True)
class OdysseyPgpoolImage:
    kind: PoolerKind
    name: str
    version: Version
    user: str | None = None  # who the pooler runs as, when not the image's own USER (never root)

    @property
    def origin(self) -> str:
        return f"image {self.name}"


def banner_version(output: str, program: Program) -> Version | None:
    """The version in the first non-empty line of `program --version`'s output, if it is that program's banner."""
    first = next((line for line in output.splitlines() if line.strip()), "")
    return banners.banner_version(first, program.banner)


def resolve_image(engine: Engine, kind: PoolerKind, template: str, wanted: Version) -> OdysseyPgpoolImage:
    """The image `template` names for `wanted`, with the exact version its program prints."""
    option, program = kind.record.image_option, PROGRAMS[kind]
    name = img.image_name(template, wanted, option)
    attrs = engine.ensure_image(name, option)
    user = img.UNPRIVILEGED_USER if img.runs_as_root(str(attrs["Config"].get("User") or "")) else None
    output = engine.run_once(name, [program.name, "--version"], user)
    exact = banner_version(output, program)
    if exact is None or not wanted.matches(exact):
        found = f"{program.title} {exact}" if exact else f"no {program.title} banner in {one_line(output, 80)!r}"
        raise ProvisionError(f"image {name} holds {found}, not {program.title} {wanted}: fix {option}")
    return OdysseyPgpoolImage(kind, name, exact, user)


class OdysseyPgpoolContainer:
    """One pooler container in front of one PostgreSQL container; `reset()` before each use."""

    entrypoint: ClassVar[tuple[str, ...]]
    command: ClassVar[tuple[str, ...]]
    stop_signal: ClassVar[str] = "SIGTERM"

    def __init__(
        self, engine: Engine, image: OdysseyPgpoolImage, settings: PoolSettings, extra: tuple[Setting, ...],
        credentials: tuple[tuple[str, str], ...], network: Network, name: str, timeout: float,
    ) -> None:
        self.engine, self.image, self.settings, self.extra = engine, image, settings, extra
        self.credentials, self.timeout = credentials, timeout
        kwargs: dict[str, Any] = {"labels": dict(engine.labels), "entrypoint": list(self.entrypoint),
                                  "stop_signal": self.stop_signal}
        if image.user:
            kwargs["user"] = image.user
        self.container = (
            DockerContainer(image.name).with_name(name).with_network(network)
            .with_command(list(self.command)).with_kwargs(**kwargs)
        )
        self.endpoint = Endpoint(LOOPBACK, 0, credentials=credentials)

    @property
    def what(self) -> str:
        program = PROGRAMS[self.image.kind]
        return (f"{program.title} {self.image.version} ({self.image.name}, {self.settings.mode.value} pool of "
                f"{self.settings.pool_size})")

    def start(self) -> None:
        for path, data in self._files().items():
            self.container.with_copy_into_container(data, path, 0o644)
        port = self.engine.start_published(self.container, self.what, pc.POOLER_PORT, self._start_error)
        self.endpoint = replace(self.endpoint, port=port)
        self._wait()
        self._after_start()

    def reset(self) -> None:
        """Make sure no server connection survives to the next use."""
        raise NotImplementedError

    def _wait(self) -> None:
        self.engine.wait_ready(self.container, self.what, self._ready, self.timeout, 0.02, self._start_error)

    def _files(self) -> dict[str, bytes]:
        raise NotImplementedError

    def _ready(self) -> str | None:
        raise NotImplementedError

    def _after_start(self) -> None:
        """What it needs once it answers, before its first use."""

    def _start_error(self, log: str) -> str | None:
        """The pooler's own one-line reason for not starting, from its log."""
        return None


class OdysseyContainer(OdysseyPgpoolContainer):
    entrypoint = pc.ODYSSEY_ENTRYPOINT
    command = pc.ODYSSEY_COMMAND

    def reset(self) -> None:
        """Killed and started again (`docker restart -t 0`): no server connection survives."""
        self.engine.restart(self.container, self.what)
        port = self.engine.published_port(self.container, pc.POOLER_PORT, self.what, self._start_error)
        self.endpoint = replace(self.endpoint, port=port)
        self._wait()

    def _files(self) -> dict[str, bytes]:
        return pc.odyssey_files(self.settings, self.extra, self.credentials)

    def _ready(self) -> str | None:
        return console_answers(self.endpoint)

    def _start_error(self, log: str) -> str | None:
        return odyssey_conf.start_error(log, pc.odyssey_files(self.settings, self.extra, self.credentials)
                                        [f"{img.CONFIG_DIR}/odyssey.conf"].decode())


class PgpoolContainer(OdysseyPgpoolContainer):
    entrypoint = pc.PGPOOL_ENTRYPOINT
    command = pc.PGPOOL_COMMAND
    stop_signal = "SIGINT"  # fast shutdown, as on the native backend

    def reset(self) -> None:
        """The idle connection children get SIGKILL; wait until pgpool-II has forked as many new ones."""
        wanted = children(self.settings, self.extra)
        code, output = self.engine.exec(self.container, pc.pgpool_reset_command(wanted))
        if code != 0:
            said = f": {one_line(output, 160)}" if output.strip() else ""
            raise StartError(
                f"could not reset {self.what}'s cached backends: its reset script exited with code {code} "
                f"(fewer than {wanted} idle connection children within 5 s){said}; see `docker logs "
                f"{self.container._name}`"
            )

    def _files(self) -> dict[str, bytes]:
        return pc.pgpool_files(self.image.version, self.settings, self.extra, self.credentials)

    def _ready(self) -> str | None:
        return answers_port(self.endpoint, pc.POOLER_PORT)

    def _start_error(self, log: str) -> str | None:
        return pgpool_conf.start_error(log)

    def _after_start(self) -> None:
        refused = refused_setting(self.endpoint, self.extra)
        if refused is not None:
            raise StartError.with_log(self.what, refused, self.engine.logs(self.container))
        self.reset()  # the backend that readiness and that check left in its cache


CONTAINERS: dict[PoolerKind, type[OdysseyPgpoolContainer]] = {
    PoolerKind.ODYSSEY: OdysseyContainer, PoolerKind.PGPOOL: PgpoolContainer,
}
