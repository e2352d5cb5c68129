"""The Docker engine as the containers backend uses it: connect, pull, build, run, clean up.

Everything a run creates carries the labels org.leakcheck.run (this run) and org.leakcheck.owner
(host:pid), plus testcontainers' session labels, so that it is removed at the end of the run, by
testcontainers' Ryuk reaper when that runs, or by the next run when the process was killed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import socket
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import docker.client
import docker.errors
import docker.models.containers
from docker.utils import parse_repository_tag
from testcontainers.core.config import testcontainers_config
from testcontainers.core.container import DockerContainer, Reaper
from testcontainers.core.docker_client import DockerClient, get_docker_host
from testcontainers.core.labels import create_labels
from testcontainers.core.network import Network

from leakcheck.model.errors import ProvisionError, StartError, one_line
from leakcheck.provision.containers.images import (
    build_error_summary,
    build_log_lines,
    down_in,
    host_port,
    is_port_error,
    published_beyond_loopback,
)
from leakcheck.provision.host.process import stopped, wait_until

log = logging.getLogger(__name__)

RUN_LABEL = "org.leakcheck.run"
OWNER_LABEL = "org.leakcheck.owner"
RECIPE_LABEL = "org.leakcheck.recipe"
LOOPBACK = "127.0.0.1"

_STEP_IMAGE = re.compile(r"---> ([0-9a-f]{12})\b")
#: A server's own reason for stopping, read from its log (None when it gives none).
Explain = Callable[[str], "str | None"]


def _no_reason(log: str) -> str | None:
    return None


#: What to do when no engine answers, as a run's error says it.
START_ONE = "start the Docker engine (or set DOCKER_HOST), or choose another backend"


def connect(unreachable: str = START_ONE) -> DockerClient:
    """testcontainers' client for the engine named by DOCKER_HOST (or the default socket); a one-line
    ProvisionError ending with `unreachable` when none answers (never starts one)."""
    where = get_docker_host() or "unix:///var/run/docker.sock"
    try:
        if where.startswith("unix://"):  # fail fast, without the SDK's retries and unclosed socket
            with socket.socket(socket.AF_UNIX) as probe:
                probe.settimeout(5)
                probe.connect(where[len("unix://") :])
        client = DockerClient()
        client.client.ping()
    except Exception as exc:  # the SDK raises DockerException, requests' errors or OSError
        raise ProvisionError(f"Docker is not reachable at {where} ({reason(exc)}): {unreachable}") from None
    return client


def reason(exc: BaseException) -> str:
    """The useful part of a Docker SDK error, on one line."""
    explanation = getattr(exc, "explanation", None)
    return one_line(explanation or exc, 200)


def start_reaper() -> None:
    """Start testcontainers' Ryuk unless disabled; where it can't run, go on without it."""
    if testcontainers_config.ryuk_disabled:
        return
    try:
        Reaper.get_instance()
    except Exception as exc:
        testcontainers_config.ryuk_disabled = True
        log.info(
            f"testcontainers' Ryuk reaper did not start ({reason(exc)}); leakcheck removes its "
            "containers itself (set TESTCONTAINERS_RYUK_DISABLED=true to skip this attempt)"
        )


def stale_owner(owner: str, hostname: str, alive: Callable[[int], bool]) -> bool:
    """Whether an org.leakcheck.owner label names a process of this host that has ended."""
    host, _, pid = owner.rpartition(":")
    return host == hostname and pid.isdigit() and not alive(int(pid))


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_dead_runs(
    api: docker.client.DockerClient, say: Callable[[str], None] = log.info, tmp: Path | None = None
) -> list[str]:
    """Remove what runs of this host that have ended (`stale_owner`) left on the engine, one line per run given to
    `say`: their fleets' host folders (`leakcheck-fleet-<run>-*` in `tmp`, default the temp dir), then their
    containers (newest first: a fleet's members before the one whose network they share), then their networks.
    Never an object without leakcheck's owner label, of another host, or of a process that still runs."""
    host = socket.gethostname()
    try:
        containers = [(c, c.labels) for c in api.containers.list(all=True, filters={"label": OWNER_LABEL})]
        networks = [(n, n.attrs.get("Labels") or {}) for n in api.networks.list(filters={"label": OWNER_LABEL})]
    except docker.errors.DockerException as exc:
        raise ProvisionError(f"Docker did not list leakcheck's containers and networks ({reason(exc)})") from None
    done: dict[str, list[str]] = {}  # owner label -> what was removed
    dead = [(thing, labels) for thing, labels in [*containers, *networks]
            if stale_owner(str(labels.get(OWNER_LABEL, "")), host, pid_alive)]
    runs = {str(labels.get(RUN_LABEL, "")): str(labels[OWNER_LABEL]) for _, labels in dead}
    for run, owner in runs.items():
        for folder in fleet_folders(run, tmp or Path(tempfile.gettempdir())):
            shutil.rmtree(folder, ignore_errors=True)
            if not folder.exists():
                done.setdefault(owner, []).append(f"folder {folder}")
    for thing, labels in dead:
        kind = "container" if isinstance(thing, docker.models.containers.Container) else "network"
        try:
            thing.remove(**({"force": True} if kind == "container" else {}))
        except docker.errors.NotFound:
            continue  # its run's own cleanup, or another sweep, was first
        except docker.errors.DockerException as exc:
            log.info(f"could not remove {kind} {thing.name} left by a killed run: {reason(exc)}")
            continue
        done.setdefault(str(labels[OWNER_LABEL]), []).append(f"{kind} {thing.name}")
    lines = [dead_run_line(owner, removed) for owner, removed in done.items()]
    for line in lines:
        say(line)
    return lines


def fleet_folders(run: str, tmp: Path) -> list[Path]:
    """The host folders of a run's fleets (fleet.py names them after the run id, 8 hex digits); none for a
    run label that is not one."""
    if not re.fullmatch(r"[0-9a-f]{8}", run):
        return []
    return [f for f in sorted(tmp.glob(f"leakcheck-fleet-{run}-*")) if f.is_dir() and not f.is_symlink()]


def dead_run_line(owner: str, removed: list[str]) -> str:
    """One line for what a killed run (its owner label, host:pid) left and the sweep removed."""
    return f"removed what a killed run (pid {owner.rpartition(':')[2]}) left on the Docker engine: {', '.join(removed)}"


@contextlib.contextmanager
def sigint_deferred() -> Iterator[None]:
    """Let a cleanup finish when Ctrl-C is pressed again; re-raise the interrupt afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pressed: list[int] = []

    def note(signum: int, frame: object) -> None:
        pressed.append(signum)
        log.info("removing leakcheck's containers; this takes a few seconds")

    previous = signal.signal(signal.SIGINT, note)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if pressed:
        raise KeyboardInterrupt


class Engine:
    """One connection to the engine, and what this run created on it."""

    def __init__(self) -> None:
        self.docker = connect()
        self.api = self.docker.client
        self.run_id = uuid.uuid4().hex[:8]
        self.labels = {RUN_LABEL: self.run_id, OWNER_LABEL: f"{socket.gethostname()}:{os.getpid()}"}
        self.built: list[str] = []
        self._containers: list[DockerContainer] = []

    # --- images ---------------------------------------------------------------------------

    def image_attrs(self, name: str) -> dict[str, Any] | None:
        try:
            return cast(dict[str, Any], self.api.images.get(name).attrs)
        except docker.errors.ImageNotFound:
            return None

    def ensure_image(self, name: str, option: str) -> dict[str, Any]:
        """The image's attributes, pulling it first when the engine does not have it."""
        attrs = self.image_attrs(name)
        if attrs is not None:
            return attrs
        repo, tag = parse_repository_tag(name)
        log.info(f"pulling {name}")
        try:
            self.api.images.pull(repo, tag=tag or "latest")
        except docker.errors.DockerException as exc:
            raise ProvisionError(
                f"image {name} is not on the Docker engine and pulling it failed ({reason(exc)}): "
                f"pull or build it, or choose another image with {option}"
            ) from None
        return cast(dict[str, Any], self.api.images.get(name).attrs)

    def tags(self) -> list[str]:
        return [tag for image in self.api.images.list() for tag in image.tags]

    def build(self, context: Path, tag: str, buildargs: dict[str, str], recipe: str) -> None:
        """docker build; when it fails, its log tail in the error and its intermediate images removed."""
        before = {image.id for image in self.api.images.list(all=True)}
        log = ""
        error = ""
        steps: set[str] = set()
        try:
            for chunk in self.api.api.build(
                path=str(context), tag=tag, buildargs=buildargs, rm=True, forcerm=True, decode=True,
                labels={RECIPE_LABEL: recipe},
            ):  # fmt: skip
                text = str(chunk.get("stream", ""))
                log = (log + text)[-20000:]
                steps.update(_STEP_IMAGE.findall(text))
                error = str(chunk.get("error", "")) or error
        except docker.errors.DockerException as exc:
            error = reason(exc)
        if not error:
            self.built.append(tag)
            return
        lines = build_log_lines(log)
        self._remove_intermediates(before, steps)
        tail = "\n".join(lines[-25:])
        raise ProvisionError(
            f"building image {tag} failed ({build_error_summary(error)}): check the base image and the "
            f"tarball source, see the build log below\n--- last lines of the build log ---\n{tail}"
        )

    def _remove_intermediates(self, before: set[str | None], steps: set[str]) -> None:
        """Untagged images a failed build left (children first: a parent can't go before them)."""
        for _ in range(50):
            left = [
                image.id
                for image in self.api.images.list(all=True)
                if image.id not in before and not image.tags and str(image.id).split(":")[-1][:12] in steps
            ]
            removed = 0
            for image_id in left:
                with contextlib.suppress(docker.errors.DockerException):
                    self.api.images.remove(image_id, force=True)
                    removed += 1
            if not removed:
                return

    # --- containers -----------------------------------------------------------------------

    def run_once(self, image: str, argv: list[str], user: str | None) -> str:
        """Run `argv` in a throwaway container without network; its output."""
        kwargs: dict[str, Any] = {"user": user} if user else {}
        container = self.api.containers.create(
            image,
            command=argv[1:],
            entrypoint=argv[:1],
            network_mode="none",
            labels=create_labels(image, self.labels),
            **kwargs,
        )
        try:
            container.start()
            status = int(container.wait(timeout=60).get("StatusCode", -1))
            output = cast(bytes, container.logs(stdout=True, stderr=True)).decode(errors="replace")
        except Exception as exc:
            raise ProvisionError(
                f"running `{' '.join(argv)}` in image {image} failed ({reason(exc)}): "
                f"the image must have {argv[0]} on its PATH"
            ) from None
        finally:
            with contextlib.suppress(docker.errors.DockerException):
                container.remove(force=True)
        if status != 0:
            raise ProvisionError(
                f"`{' '.join(argv)}` in image {image} exited with code {status} ({one_line(output, 160)}): "
                f"the image must have {argv[0]} on its PATH"
            )
        return output

    def network(self, suffix: str) -> Network:
        network = Network(docker_network_kw={"labels": dict(self.labels)})
        network.name = f"leakcheck-{self.run_id}-{suffix}"
        return network.create()

    def start(self, container: DockerContainer, what: str) -> None:
        """Create and start it (tracked for removal even when starting fails)."""
        self._containers.append(container)
        try:
            container.start()
        except docker.errors.APIError as exc:
            if is_port_error(str(exc)):
                raise StartError(
                    f"{what} did not start: Docker could not publish its port on 127.0.0.1 "
                    f"({reason(exc)}): free a port range or check the engine's port publishing"
                ) from None
            raise StartError(f"{what} did not start: {reason(exc)}") from None

    def start_published(self, container: DockerContainer, what: str, port: int, explain: Explain = _no_reason) -> int:
        """Start it with `port` published on 127.0.0.1 only, on a host port the engine picks; that port."""
        cast(dict[str, Any], container.ports)[f"{port}/tcp"] = (LOOPBACK, None)  # docker-py's (address, port)
        self.start(container, what)
        return self.published_port(container, port, what, explain)

    def wait_ready(
        self, container: DockerContainer, what: str, ready: Callable[[], str | None], timeout: float,
        poll: float = 0.2, explain: Explain = _no_reason,
    ) -> None:
        """Poll `ready` (None: ready, else why not) every `poll` s until it is; a StartError with the
        container's log when the container exits first (see `exited`) or `timeout` passes."""
        wait_until(what, ready, lambda: self.exited(container, explain), timeout, lambda: self.logs(container),
                   poll=poll)

    def exited(self, container: DockerContainer, explain: Explain = _no_reason) -> str | None:
        """None while it runs, else e.g. "its container exited with code 1", with `explain(its log)`
        (the server's own reason for stopping) when that finds one."""
        status, code = self.state(container)
        if status not in ("exited", "dead"):
            return None
        own = explain(self.logs(container))
        return f"its container {status} with code {code}" + (f": {own}" if own else "")

    def restart(self, container: DockerContainer, what: str) -> None:
        """`docker restart -t 0`: killed at once and started again (the published host port may change)."""
        try:
            container.get_wrapped_container().restart(timeout=0)
        except docker.errors.DockerException as exc:
            raise StartError(f"restarting {what} failed ({reason(exc)}): see `docker logs {container._name}`") from None

    def exec(self, container: DockerContainer, argv: Sequence[str]) -> tuple[int, str]:
        """`docker exec` as the container's own user: the exit code and the output (stdout and stderr)."""
        result = container.get_wrapped_container().exec_run(list(argv))
        return int(result.exit_code), cast(bytes, result.output or b"").decode(errors="replace")

    def published_port(self, container: DockerContainer, port: int, what: str, explain: Explain = _no_reason) -> int:
        """The host port `port` is published on, once the container runs; a StartError (the container stopped)
        when anything of it is published beyond 127.0.0.1 (`published_beyond_loopback`)."""
        wrapped = container.get_wrapped_container()
        wrapped.reload()
        beyond = published_beyond_loopback(wrapped.attrs)
        if beyond:
            with contextlib.suppress(docker.errors.DockerException):
                wrapped.kill()
            raise StartError(f"{what} is published on {', '.join(beyond)}, beyond {LOOPBACK}: stopped it; a setting "
                             "reached Docker that leakcheck did not write, report this")
        found = host_port(wrapped.attrs.get("NetworkSettings", {}).get("Ports") or {}, port)
        if found is None:
            why = self.exited(container, explain) or f"port {port} was not published on 127.0.0.1"
            raise StartError.with_log(what, why, self.logs(container))
        return found

    def down(self, container: DockerContainer) -> str | None:
        """Why the container no longer serves, else None: it exited (its code), is paused or was removed, or its
        main process is stopped (SIGSTOP: read from /proc, as the engine runs on this machine's kernel). One
        `docker inspect`, cheap enough for the run's watcher (run/watch.py)."""
        wrapped = container.get_wrapped_container()
        try:
            wrapped.reload()
        except docker.errors.NotFound:
            return "its container was removed"
        except docker.errors.DockerException as exc:
            return f"Docker did not say whether its container runs ({reason(exc)})"
        return down_in(wrapped.attrs.get("State") or {}, stopped)

    def state(self, container: DockerContainer) -> tuple[str, int]:
        wrapped = container.get_wrapped_container()
        wrapped.reload()
        state = wrapped.attrs.get("State", {})
        return str(state.get("Status", "unknown")), int(state.get("ExitCode", 0))

    def logs(self, container: DockerContainer) -> str:
        try:
            data = container.get_wrapped_container().logs(stdout=True, stderr=True, tail=200)
        except Exception as exc:
            return f"(no log: {one_line(exc)})"
        return cast(bytes, data).decode(errors="replace")

    def remove(self, container: DockerContainer) -> None:
        with contextlib.suppress(docker.errors.NotFound):
            container.stop()
        if container in self._containers:
            self._containers.remove(container)

    # --- cleanup --------------------------------------------------------------------------

    def sweep_stale(self) -> None:
        """Remove what runs on this host left behind when they were killed."""
        sweep_dead_runs(self.api)

    def close(self, remove_built: bool) -> list[str]:
        """Remove this run's containers, networks and (if asked) built images; what failed."""
        problems: list[str] = []
        for container in reversed(self._containers):
            try:
                self.remove(container)
            except Exception as exc:
                problems.append(f"container {container._name}: {one_line(exc)}")
        mine = {"label": f"{RUN_LABEL}={self.run_id}"}
        for leftover in self.api.containers.list(all=True, filters=mine):
            try:
                leftover.remove(force=True)
            except docker.errors.DockerException as exc:
                problems.append(f"container {leftover.name}: {one_line(exc)}")
        for network in self.api.networks.list(filters=mine):
            try:
                network.remove()
            except docker.errors.DockerException as exc:
                problems.append(f"network {network.name}: {one_line(exc)}")
        for tag in self.built if remove_built else []:
            try:
                self.api.images.remove(tag, force=True)
            except docker.errors.DockerException as exc:
                problems.append(f"image {tag}: {one_line(exc)}")
        self.api.close()
        return problems
