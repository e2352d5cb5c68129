"""A proof is never taken on a client's word (issue 26): a team agent that reports a forged server identity
(pg_backend_pid() and backend_start of a backend that does not exist) gets an error for every probe, never a
verdict, also for a probe whose leak its honest twin measures, and on a fleet."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from leakcheck.drivers.agents.catalogue import shipped
from leakcheck.drivers.agents.install import installed

pytestmark = pytest.mark.servers

FORGE = ("  const oids = last.fields.map((f) => f.dataTypeID)\n"
         "  const at = last.fields.findIndex((f) => f.name === 'pg_backend_pid')\n"
         "  if (at >= 0) last.rows = last.rows.map((row) => "
         "row.map((v, i) => (i === at ? 4242 : i === at + 1 ? '1700000000000000' : v)))\n")


@pytest.fixture(scope="module")
def forger() -> Iterator[Path]:
    """The shipped node-postgres agent under the name `forger`, answering every identity column with a backend
    that does not exist (pid 4242, started 2023)."""
    node = shipped("node-postgres")
    assert node is not None
    made = installed(node.spec)
    folder = Path(tempfile.mkdtemp(prefix="leakcheck-forger-"))
    try:
        shutil.copytree(made.folder / "node_modules", folder / "node_modules")
        source = (made.folder / "agent.js").read_text().replace("driver: 'node-postgres'", "driver: 'forger'")
        source = source.replace("  const oids = last.fields.map((f) => f.dataTypeID)\n", FORGE)
        assert "driver: 'forger'" in source and "4242" in source
        agent = folder / "forger-agent"
        agent.write_text("#!/usr/bin/env node\n" + source)
        agent.chmod(0o755)
        for path in (folder, *folder.rglob("*")):
            path.chmod(path.stat().st_mode | 0o055 if path.is_dir() else path.stat().st_mode | 0o044)
        yield agent
    finally:
        shutil.rmtree(folder)


def _verdicts(pytester: pytest.Pytester, *args: str) -> dict[str, str]:
    pytester.runpytest_inprocess("--pg=16", "--controls=no", "--jobs=2", "--results=r.json", "-p",
                                 "no:cacheprovider", *args)
    outcomes = json.loads((pytester.path / "r.json").read_text())["outcomes"]
    return {f"{o['probe']}/{o['driver']}": f"{o['verdict']}: {o['evidence'][:160]}" for o in outcomes}


def test_a_forged_identity_is_an_error_for_every_probe_and_never_a_verdict(pytester: pytest.Pytester,
                                                                            forger: Path) -> None:
    got = _verdicts(pytester, "--bouncer=1.24", f"--drivers=node-postgres,cmd:{forger}",
                    "--probes=custom_setting,statement_timeout,protocol_prepare,cancel_late")
    honest = {k: v for k, v in got.items() if k.endswith("/node-postgres")}
    forged = {k: v for k, v in got.items() if k.endswith("/cmd-forger")}
    assert honest["custom_setting/node-postgres"].startswith("leaks")  # the leak its honest twin measures
    assert len(forged) == 4 and all(v.startswith("error") for v in forged.values()), forged
    assert all("reported server connection pid 4242" in v for v in forged.values()), forged


def test_a_forged_identity_on_a_fleet_is_an_error_too(pytester: pytest.Pytester, forger: Path) -> None:
    got = _verdicts(pytester, "--bouncer-fleet=2", "--bouncer=1.24", f"--drivers=cmd:{forger}",
                    "--bouncer-set=peering=yes", "--probes=cancel_own,cancel_late,custom_setting")
    assert got and all(v.startswith(("error", "not_applicable")) for v in got.values()), got
    assert any(v.startswith("error") for v in got.values()), got
