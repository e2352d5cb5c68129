"""An agent in leakcheck's cache: sources copied, npm packages installed, built, and its release known.

Layout: CACHE/agents/<id>/<key>/ holds the agent's sources, what `npm install` and its build made,
and agent.json (`{"release": "8.23.1", "runtime": "node 20.20.2"}`, from the agent's own `hello`,
i.e. read from what was installed). The key hashes the spec, the sources and the runtime program
(its path, size and time), so a changed agent or runtime gets a folder of its own. A folder is made
aside (`.<key>-<random>`) under the agent's lock and renamed into place, so a half-made one is never
used.

A driver's toolchain (its runtime, build tools and driver: the spec's `apt` packages) is installed when
that driver is asked for, never before: by `leakcheck prepare --drivers=ID` or the first run that names it,
as root with apt-get (one progress line says so); otherwise the one line to run is the error. Set-up
(scripts/bootstrap) installs none of them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from leakcheck.drivers.agents.process import AgentProcess
from leakcheck.drivers.agents.spec import AgentSpec
from leakcheck.model.errors import ProvisionError
from leakcheck.model.versions import Version, version_in_output
from leakcheck.provision.host.system import cache_root, file_lock

log = logging.getLogger(__name__)

#: Seconds `npm install`, each build command and each apt-get step may take.
INSTALL_TIMEOUT = 300.0
SOURCES = Path(__file__).parent


@dataclass(frozen=True)
class Installed:
    """An agent ready to start: its spec, its cache folder and the driver release it reported."""

    spec: AgentSpec
    folder: Path
    release: Version | None
    runtime: str

    def argv(self) -> list[str]:
        return [part.replace("{dir}", str(self.folder)) for part in self.spec.run]

    def start(self) -> AgentProcess:
        return AgentProcess(self.spec.id, self.argv(), self.folder)


def missing_apt(spec: AgentSpec) -> list[str]:
    """The spec's Debian packages that dpkg does not list as installed."""
    out = []
    for package in spec.apt:
        done = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True,
                              check=False, timeout=30)
        if "install ok installed" not in done.stdout:
            out.append(package)
    return out


def install_apt(spec: AgentSpec) -> None:
    """As root: apt-get update, then install what is missing (said in one progress line). Otherwise
    ProvisionError with the line to run."""
    missing = missing_apt(spec)
    if not missing:
        return
    line = f"apt-get install -y {' '.join(missing)}"
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise ProvisionError(f"the {spec.id} agent needs Debian packages: run `sudo {line}` (or `leakcheck prepare "
                             f"--drivers={spec.id}` as root)")
    log.info(f"installing the {spec.id} agent's {spec.language} toolchain with apt-get: {' '.join(missing)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    _run(["apt-get", "update", "-qq"], Path("/"), "`apt-get update`", env)  # a fresh machine has no lists
    _run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], Path("/"), f"`{line}`", env)


def _run(argv: list[str], cwd: Path, what: str, env: dict[str, str] | None = None) -> None:
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False, timeout=INSTALL_TIMEOUT,
                              env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ProvisionError(f"{what} failed: {exc}") from None
    if done.returncode != 0:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-5:])
        raise ProvisionError(f"{what} failed (exit {done.returncode}): {tail}")


def _key(spec: AgentSpec) -> str:
    digest = hashlib.sha256(repr(spec).encode())
    for name in spec.sources:
        digest.update((SOURCES / spec.id / name).read_bytes())
    runtime = shutil.which(spec.run[0]) if spec.run else None
    if runtime:
        stat = Path(runtime).resolve().stat()
        digest.update(f"{Path(runtime).resolve()} {stat.st_size} {stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def _read(spec: AgentSpec, folder: Path) -> Installed | None:
    try:
        said = json.loads((folder / "agent.json").read_text())
    except (OSError, ValueError):
        return None
    return Installed(spec, folder, version_in_output(str(said.get("release", ""))), str(said.get("runtime", "")))


def _make(spec: AgentSpec, store: Path, key: str) -> Installed:
    work = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=store))
    try:
        for name in spec.sources:
            shutil.copy2(SOURCES / spec.id / name, work / name)
        if spec.npm:
            npm = shutil.which("npm")
            if npm is None:
                raise ProvisionError(f"the {spec.id} agent needs npm (and node): install them, e.g. "
                                     "`apt-get install -y nodejs npm`")
            _run([npm, "install", "--no-audit", "--no-fund", "--loglevel=error", *spec.npm], work,
                 f"npm install {' '.join(spec.npm)} for the {spec.id} agent")
        for command in spec.build:
            argv = [part.replace("{dir}", str(work)) for part in command]
            _run(argv, work, f"building the {spec.id} agent ({' '.join(argv)})")
        folder = store / key
        agent = Installed(spec, work, None, "").start()  # its hello names the release npm or apt installed
        agent.stop()
        hello = {"release": agent.hello.get("release", ""), "runtime": agent.hello.get("runtime", "")}
        (work / "agent.json").write_text(json.dumps(hello) + "\n")
        os.rename(work, folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    made = _read(spec, folder)
    assert made is not None
    return made


@functools.cache
def installed(spec: AgentSpec) -> Installed:
    """The agent from the cache, made there first if needed (ProvisionError saying what to do)."""
    if spec.apt and missing_apt(spec):
        install_apt(spec)  # as root it installs; otherwise its error is the line to run
    store = cache_root() / "agents" / spec.id
    key = _key(spec)
    found = _read(spec, store / key)
    if found is not None:
        return found
    store.mkdir(parents=True, exist_ok=True)
    with file_lock(store / ".lock"):
        return _read(spec, store / key) or _make(spec, store, key)
