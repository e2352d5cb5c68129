"""An agent in leakcheck's cache: sources copied, npm or pip packages installed, built, and its release known.

Layout: CACHE/agents/<id>/<key>/ holds the agent's sources, what `npm install` and its build made (a
`pip` agent: venv/, a virtual environment of Debian's python3 with its packages),
and agent.json (`{"release": "8.23.1", "runtime": "node 20.20.2"}`, from the agent's own `hello`,
i.e. read from what was installed). The key hashes the spec, the sources, the runtime program
(Debian's python3 for a `pip` agent) and the compilers of its `tools` (their path, size and time), so a
changed agent, runtime or compiler gets a folder of its own. Beside the keys,
CACHE/agents/<id>/.build-cache/ keeps what its builds download and cache (`{cache}` in a spec: Go's
module and build caches, cargo's registry and target folder, a Maven repository), so a new key builds
from there and a registry is asked once. A folder is made
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
from leakcheck.drivers.agents.toolchains import Found, find
from leakcheck.model.errors import ProvisionError
from leakcheck.model.versions import Version, version_in_output
from leakcheck.provision.host.system import cache_root, file_lock

log = logging.getLogger(__name__)

#: Seconds `npm install`, `pip install` and each apt-get step may take (a build command: its spec's `build_timeout`).
INSTALL_TIMEOUT = 300.0
SOURCES = Path(__file__).parent
#: The folder of CACHE/agents/<id>/ where its builds keep what they download and cache (a spec's `{cache}`).
#: A build folder: the test suite's cache does not link it from the user's (tests/support/cache.py), as
#: cargo rewrites its target folder's files in place.
BUILD_CACHE = ".build-cache"
#: The interpreter a `pip` agent's virtual environment is made with (python3-venv in its `apt`).
PYTHON = "/usr/bin/python3"


@dataclass(frozen=True)
class Installed:
    """An agent ready to start: its spec, its cache folder and the driver release it reported."""

    spec: AgentSpec
    folder: Path
    release: Version | None
    runtime: str

    def argv(self) -> list[str]:
        return [part.replace("{dir}", str(self.folder)) for part in self.spec.run]

    def start(self, preloaded: bool = True) -> AgentProcess:
        """A new agent process: a fork of the run's preloader when its spec has one (`preloaded`)."""
        preload = [part.replace("{dir}", str(self.folder)) for part in self.spec.preload] if preloaded else []
        return AgentProcess(self.spec.id, self.argv(), self.folder, preload=preload or None)


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


def _tools(spec: AgentSpec) -> dict[str, Found]:
    """The compilers of the spec's `tools` (ProvisionError, one line, when one is missing or too old)."""
    return {name: find(name, minimum, spec.id) for name, minimum in spec.tools}


def _fill(text: str, values: dict[str, str]) -> str:
    for name, value in values.items():
        text = text.replace("{" + name + "}", value)
    return text


def _run(argv: list[str], cwd: Path, what: str, env: dict[str, str] | None = None,
         timeout: float = INSTALL_TIMEOUT) -> None:
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False, timeout=timeout, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ProvisionError(f"{what} failed: {exc}") from None
    if done.returncode != 0:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-5:])
        raise ProvisionError(f"{what} failed (exit {done.returncode}): {tail}")


def _key(spec: AgentSpec) -> str:
    digest = hashlib.sha256(repr(spec).encode())
    for name in spec.sources:
        digest.update((SOURCES / spec.id / name).read_bytes())
    for tool in _tools(spec).values():
        digest.update(tool.fingerprint().encode())
    runtime = PYTHON if spec.pip else shutil.which(spec.run[0]) if spec.run else None
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
    values = {"dir": str(work), "cache": str(store / BUILD_CACHE)}
    for name, tool in _tools(spec).items():
        values |= {name: str(tool.path), f"{name}_version": str(tool.version)}
    env = {**os.environ, **{k: _fill(v, values) for k, v in spec.build_env}} if spec.build_env else None
    try:
        for name in spec.sources:
            shutil.copy2(SOURCES / spec.id / name, work / Path(name).name)
        if spec.npm:
            npm = shutil.which("npm")
            if npm is None:
                raise ProvisionError(f"the {spec.id} agent needs npm (and node): install them, e.g. "
                                     "`apt-get install -y nodejs npm`")
            # no package's install script runs (as root, at install): no agent needs one, and Prisma's would
            # fetch its schema engine from binaries.prisma.sh, outside npm
            _run([npm, "install", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error", *spec.npm], work,
                 f"npm install {' '.join(spec.npm)} for the {spec.id} agent")
        if spec.pip:  # a venv of Debian's python3, so the agent's packages never meet leakcheck's own
            _run([PYTHON, "-m", "venv", str(work / "venv")], work, f"making the {spec.id} agent's venv")
            _run([str(work / "venv" / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-input",
                  "--disable-pip-version-check", *spec.pip], work,
                 f"pip install {' '.join(spec.pip)} for the {spec.id} agent")
        if spec.tools:  # a compiled agent's first build fetches its packages and compiles them: minutes
            log.info(f"building the {spec.id} agent into {store} with {', '.join(values[n] for n, _ in spec.tools)}")
        for command in spec.build:
            argv = [_fill(part, values) for part in command]
            _run(argv, work, f"building the {spec.id} agent ({' '.join(argv)})", env, spec.build_timeout)
        folder = store / key
        # its hello names the release npm or apt installed (a start of its own: no preloader of a folder renamed next)
        agent = Installed(spec, work, None, "").start(preloaded=False)
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
