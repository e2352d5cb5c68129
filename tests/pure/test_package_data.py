"""What a wheel of leakcheck carries: the Dockerfile the containers backend builds, read with
importlib.resources from the installed package (no link out of the package)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from leakcheck.provision.containers import images

ROOT = Path(__file__).resolve().parents[2]


def _wheel(tmp_path: Path) -> Path:
    """A wheel built offline from a copy of the source (the build's folders stay out of the checkout)."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "leakcheck", source / "leakcheck", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "-w", str(tmp_path / "dist"), str(source)], check=True, timeout=120)
    (wheel,) = (tmp_path / "dist").glob("leakcheck-*.whl")
    return wheel


def test_a_wheel_holds_the_pgbouncer_dockerfile_and_the_installed_package_reads_it(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path)
    inside = f"leakcheck/provision/containers/{images.PGBOUNCER_DOCKERFILE}"
    assert inside in zipfile.ZipFile(wheel).namelist()
    # The package imported from the wheel itself (a zip on the path comes before the editable install).
    read = subprocess.run(
        [sys.executable, "-c", "import sys; from leakcheck.provision.containers import images as i; "
         "print(i.__file__); sys.stdout.flush(); sys.stdout.buffer.write(i.pgbouncer_dockerfile())"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(wheel)}, capture_output=True, check=True, timeout=60,
    )
    where, _, text = read.stdout.partition(b"\n")
    assert where.decode().startswith(str(wheel))
    assert text == images.pgbouncer_dockerfile()
    assert b"ARG PGBOUNCER_VERSION" in text


def test_no_file_of_the_package_is_a_link_out_of_it() -> None:
    links = [str(Path(d, n).relative_to(ROOT)) for d, dirs, files in os.walk(ROOT / "leakcheck")
             for n in dirs + files if Path(d, n).is_symlink()]
    assert links == []
    assert not (ROOT / "leakcheck" / "_docker").exists()


def test_a_wheel_holds_every_file_a_shipped_agent_is_built_from(tmp_path: Path) -> None:
    from leakcheck.drivers.agents.catalogue import CATALOGUE

    names = set(zipfile.ZipFile(_wheel(tmp_path)).namelist())
    needed = {os.path.normpath(f"leakcheck/drivers/agents/{shipped.spec.id}/{name}")
              for shipped in CATALOGUE for name in shipped.spec.sources}
    assert sorted(needed - names) == []
