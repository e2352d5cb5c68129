"""Building a PgBouncer release tarball into a runnable program in the cache (tarballs are PgBouncer's
only; a finished build is moved into place by sources/program_folder.py, as Debian packages are).

The build runs in a temp folder beside its final place; callers hold the cache lock.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from leakcheck.model.errors import ProvisionError
from leakcheck.provision.host import children
from leakcheck.provision.sources import safe_tar
from leakcheck.provision.sources.program_folder import install

log = logging.getLogger(__name__)

#: Debian packages a source build needs (c-ares is optional: without it PgBouncer uses evdns).
BUILD_PACKAGES = ("build-essential", "pkg-config", "libevent-dev", "libssl-dev", "libc-ares-dev")
_INSTALL_HINT = f"install the build dependencies: apt-get install {' '.join(BUILD_PACKAGES)}"


def build_tarball(tarball: Path, store: Path, origin: str) -> Path:
    """`./configure --prefix && make && make install` of a release tarball; the cache folder it made."""
    missing = [tool for tool in ("cc", "make") if shutil.which(tool) is None]
    if missing:
        raise ProvisionError(f"cannot build {tarball.name}: no {' or '.join(missing)}; {_INSTALL_HINT}")
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=store))
    try:
        try:
            safe_tar.extract(tarball, work / "src")
        except (OSError, EOFError, tarfile.TarError) as exc:  # EOFError: a gzip stream cut short
            raise ProvisionError(f"cannot unpack {tarball.name}: {exc or type(exc).__name__}") from exc
        sources = sorted(p.parent for p in (work / "src").glob("*/configure"))
        if not sources:
            raise ProvisionError(f"{tarball.name} has no configure script (not a release tarball?)")
        log.info(f"building PgBouncer from {tarball.name} (about 20 s) ...")
        out = work / "out"
        jobs = f"-j{max(2, min(8, os.cpu_count() or 2))}"
        steps = (["./configure", f"--prefix={out}"], ["make", jobs], ["make", "install"])
        for number, step in enumerate(steps):
            _run_build_step(step, sources[0], work / f"step{number}.log")
        return install(out, store, origin)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run_build_step(argv: list[str], cwd: Path, log: Path) -> None:
    env = dict(os.environ, LC_ALL="C")
    with open(log, "w") as handle:
        try:
            code = children.run(argv, cwd=cwd, env=env, log=handle, timeout=900).returncode
        except (OSError, subprocess.SubprocessError) as exc:
            raise ProvisionError(f"{argv[0]} failed: {exc}") from exc
    if code != 0:
        step = "configure" if argv[0] == "./configure" else " ".join(argv)
        raise ProvisionError(f"{step} failed: {build_failure(log.read_text(errors='replace'))}")


def build_failure(log: str) -> str:
    """One line out of a failed build's output, with the packages to install when configure failed."""
    found = re.search(r"^configure: error: (.+)$", log, re.MULTILINE)
    if found:
        return f"{found.group(1).rstrip(':. ')}; {_INSTALL_HINT}"
    errors = [line.strip() for line in log.splitlines() if re.search(r"\berror\b", line, re.IGNORECASE)]
    return (errors or [line.strip() for line in log.splitlines() if line.strip()] or ["no output"])[-1]
