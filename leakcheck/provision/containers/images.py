"""Image names, PgBouncer tarballs, build inputs and PgBouncer's files for containers (pure)."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from leakcheck.model.errors import ProvisionError, UsageError, one_line
from leakcheck.model.pool_settings import PoolSettings
from leakcheck.model.target import Setting
from leakcheck.model.versions import Version
from leakcheck.provision.base import DBNAME, USER
from leakcheck.provision.host.proc_sockets import LOOPBACK
from leakcheck.provision.host.process import STOPPED
from leakcheck.provision.pgbouncer.ini import BouncerLayout, render_auth_file, render_ini
from leakcheck.provision.pgbouncer.team_ini import TeamIni

DEFAULT_PG_IMAGE = "postgres:{version}"
DEFAULT_BUILD_TAG = "leakcheck/pgbouncer:{version}"
DEFAULT_BASE_IMAGE = "debian:bookworm-slim"
#: The image the PgBouncer Dockerfile builds FROM, when the backend is not given one.
BASE_IMAGE_ENV = "LEAKCHECK_PGBOUNCER_BASE_IMAGE"

#: The Dockerfile of the one image the backend builds, inside this package (a wheel carries it).
PGBOUNCER_DOCKERFILE = "dockerfiles/pgbouncer/Dockerfile"

PG_PORT = 5432
BOUNCER_PORT = 6432
PG_ALIAS = "postgres"
CONFIG_DIR = "/leakcheck"
UNPRIVILEGED_USER = "65534:65534"  # nobody:nogroup, for images whose default user is root

_TEMPLATE_HELP = "an image name where {version} and {major} are the only fields, e.g. postgres:{version}"


def image_name(template: str, version: Version, option: str) -> str:
    """`template` with {version} (as asked: 16, 1.24.1) and {major} (its first number) filled in."""
    try:
        name = template.format(version=str(version), major=str(version.parts[0]))
    except (KeyError, IndexError, ValueError):
        raise UsageError.bad_value(option, template, _TEMPLATE_HELP) from None
    if not name or any(ch.isspace() for ch in name):
        raise UsageError.bad_value(option, template, _TEMPLATE_HELP)
    return name


def check_template(template: str, option: str) -> str:
    """Fail at construction, not mid-run, when a template cannot be filled."""
    image_name(template, Version((0, 0, 0)), option)
    return template


def pick_build_version(
    wanted: Version, available: Iterable[Version], known: Iterable[Version] = ()
) -> Version | None:
    """The exact release to build: `wanted` when it has three numbers, else the newest release
    among `available` (local tarballs, images built before) that it matches, else the newest of
    `known` (the release table, whose tarballs are downloaded) that it matches.

    What is already here comes first, as in the native backend: 1.24 keeps meaning the 1.24.x
    image this machine has built."""
    if len(wanted.parts) >= 3:
        return wanted
    for versions in (available, known):
        matching = [v for v in versions if len(v.parts) >= 3 and wanted.matches(v)]
        if matching:
            return max(matching)
    return None


def versions_in_tags(template: str, tags: Iterable[str]) -> list[Version]:
    """Exact versions of the images named like `template`, e.g. leakcheck/pgbouncer:1.24.1."""
    if "{version}" not in template:
        return []
    pattern = re.escape(template).replace(re.escape("{version}"), r"(\d+\.\d+\.\d+)", 1)
    pattern = pattern.replace(re.escape("{version}"), r"\d+\.\d+\.\d+").replace(re.escape("{major}"), r"\d+")
    compiled = re.compile(f"^{pattern}$")
    return [Version.parse(m.group(1)) for m in map(compiled.match, tags) if m]


def pgbouncer_dockerfile() -> bytes:
    """The PgBouncer Dockerfile the backend builds, read from the installed package."""
    resource = resources.files(__package__).joinpath(PGBOUNCER_DOCKERFILE)
    try:
        return resource.read_bytes()
    except OSError as exc:
        raise ProvisionError(
            f"leakcheck's PgBouncer Dockerfile is missing ({resource}: {exc.strerror}): "
            "reinstall leakcheck, or name a PgBouncer image with --bouncer-image"
        ) from None


def write_build_context(dest: Path, version: Version, tarball: Path | None) -> None:
    """The Dockerfile plus tarballs/ (holding the release tarball when there is a local one)."""
    (dest / "Dockerfile").write_bytes(pgbouncer_dockerfile())
    (dest / "tarballs").mkdir()
    (dest / "tarballs" / ".keep").write_text("")
    if tarball is not None:
        shutil.copyfile(tarball, dest / "tarballs" / f"pgbouncer-{version}.tar.gz")


def build_args(version: Version, base_image: str, tarball_url: str) -> dict[str, str]:
    return {
        "PGBOUNCER_VERSION": str(version),
        "BASE_IMAGE": base_image,
        "TARBALL_URL": tarball_url.format(version=str(version)),
    }


def bouncer_layout() -> BouncerLayout:
    """Where PgBouncer listens, logs and finds its server inside its container."""
    return BouncerLayout(
        listen_port=BOUNCER_PORT,
        server_host=PG_ALIAS,
        server_port=PG_PORT,
        dbname=DBNAME,
        user=USER,
        auth_file=f"{CONFIG_DIR}/userlist.txt",
        logfile="",  # stderr, so `docker logs` shows it
        pidfile="",
        unix_socket_dir="",
        listen_addr="0.0.0.0",
    )


def bouncer_files(
    settings: PoolSettings, credentials: tuple[tuple[str, str], ...], extra: tuple[Setting, ...] = (),
    team: TeamIni | None = None, layout: BouncerLayout | None = None,
) -> dict[str, bytes]:
    """pgbouncer.ini and its auth file for a container (`bouncer_layout()` unless a fleet's member
    gives its own): the same renderer as the native backend."""
    layout = layout or bouncer_layout()
    return {
        f"{CONFIG_DIR}/pgbouncer.ini": render_ini(settings, layout, extra, team).encode(),
        f"{CONFIG_DIR}/userlist.txt": render_auth_file(credentials).encode(),
    }


def runs_as_root(image_user: str) -> bool:
    """True when an image's configured USER is root (empty means root)."""
    name = image_user.split(":", 1)[0].strip()
    return name in ("", "root", "0")


def host_port(ports: Mapping[str, object], container_port: int) -> int | None:
    """The port published on 127.0.0.1 for `container_port`, from `NetworkSettings.Ports`."""
    bindings = ports.get(f"{container_port}/tcp")
    if not isinstance(bindings, list):
        return None
    for binding in bindings:
        if (
            isinstance(binding, dict)
            and binding.get("HostIp") in ("127.0.0.1", "")
            and binding.get("HostPort")
        ):
            return int(binding["HostPort"])
    return None


def published_beyond_loopback(attrs: Mapping[str, Any]) -> list[str]:
    """What of a container's publishing (`docker inspect`: NetworkSettings.Ports, what the engine made, and
    HostConfig.PortBindings, what was asked where nothing was made at that address) others could reach beyond
    127.0.0.1, e.g. "6432/tcp on 0.0.0.0:32768"; the host's own network too. Empty when every published port is
    on 127.0.0.1 only."""
    host_config = attrs.get("HostConfig") or {}
    made = _beyond_loopback((attrs.get("NetworkSettings") or {}).get("Ports"))
    asked = [b for b in _beyond_loopback(host_config.get("PortBindings")) if not any(m[:2] == b[:2] for m in made)]
    found = ["the host's network (--network host)"] if host_config.get("NetworkMode") == "host" else []
    for port, address, host_port in made + asked:
        where = f"[{address}]" if ":" in address else address or "every address"
        found.append(f"{port} on {where}" + (f":{host_port}" if host_port else ""))
    return list(dict.fromkeys(found))


def _beyond_loopback(ports: object) -> list[tuple[str, str, str]]:
    """(port, host address, host port) of each binding in a `docker inspect` port map not on 127.0.0.1."""
    found = []
    for port, bindings in (ports if isinstance(ports, Mapping) else {}).items():
        for binding in bindings if isinstance(bindings, list) else []:
            known = binding if isinstance(binding, Mapping) else {}
            if known.get("HostIp") != LOOPBACK:
                found.append((str(port), str(known.get("HostIp") or ""), str(known.get("HostPort") or "")))
    return found


def down_in(state: Mapping[str, Any], stopped: Callable[[int], bool]) -> str | None:
    """Why a container whose `docker inspect` State is `state` no longer serves, else None: it exited or is dead
    (its code), paused, restarting..., or its main process (State.Pid) is `stopped` (SIGSTOP)."""
    status = str(state.get("Status", "unknown"))
    if status == "running":
        pid = state.get("Pid")
        return STOPPED if isinstance(pid, int) and pid > 0 and stopped(pid) else None
    if status in ("exited", "dead"):
        return f"its container {status} with code {state.get('ExitCode', '?')}"
    return f"its container is {status}" + (": it cannot answer" if status == "paused" else "")


def is_port_error(message: str) -> bool:
    """Whether a Docker API error on container start is about publishing a port."""
    text = message.lower()
    return any(
        marker in text
        for marker in (
            "port is already allocated",
            "address already in use",
            "programming external connectivity",
        )
    )


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_FAILED_STEP = re.compile(r"^The command '.*' returned a non-zero code: (\d+)$", re.DOTALL)


def build_log_lines(text: str) -> list[str]:
    """A classic-builder log as plain lines (no colour codes, no blank lines)."""
    return [line.rstrip() for line in _ANSI.sub("", text).splitlines() if line.strip()]


def build_error_summary(error: str) -> str:
    """Docker's build error, without the whole RUN command it repeats."""
    failed = _FAILED_STEP.match(error.strip())
    return f"a RUN step exited with code {failed.group(1)}" if failed else one_line(error, 160)
