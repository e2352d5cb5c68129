"""The rule of this tier, checked by tests/conftest.py: no network, no server (pure checks, nothing is run)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from leakcheck.provision.host.children import SUPERVISOR
from tests.support.tier_guard import refusal


@pytest.mark.parametrize(
    ("event", "args"),
    [
        ("socket.connect", (None, ("192.0.2.10", 443))),
        ("socket.connect", (None, ("2001:db8::1", 443, 0, 0))),
        ("socket.sendto", (None, ("192.0.2.53", 53))),
        ("socket.getaddrinfo", ("registry.npmjs.org", 443, 0, 0, 0)),
        ("subprocess.Popen", ("npm", ["npm", "view", "x"], None, None)),
        ("subprocess.Popen", (sys.executable, [sys.executable, "-I", "-c", SUPERVISOR, "1", "apt-get", "update"],
                              None, None)),
    ],
)
def test_a_connection_a_lookup_or_a_fetching_program_is_refused(event: str, args: tuple[object, ...]) -> None:
    assert refusal(event, args)


@pytest.mark.parametrize(
    ("event", "args"),
    [
        ("socket.connect", (None, ("127.0.0.1", 5432))),
        ("socket.connect", (None, ("::1", 5432, 0, 0))),
        ("socket.connect", (None, "/var/run/docker.sock")),
        ("socket.getaddrinfo", ("localhost", 5432, 0, 0, 0)),
        ("socket.getaddrinfo", (None, 0, 0, 0, 0)),
        ("subprocess.Popen", ("sh", ["sh", "-c", "sleep 1"], None, None)),
    ],
)
def test_loopback_unix_sockets_and_local_programs_are_allowed(event: str, args: tuple[object, ...]) -> None:
    assert refusal(event, args) is None


def test_a_real_server_binary_is_refused_but_asking_its_version_or_a_stand_in_script_is_not(tmp_path: Path) -> None:
    binary = tmp_path / "postgres"
    binary.write_bytes(b"\x7fELF" + bytes(60))
    assert refusal("subprocess.Popen", (str(binary), [str(binary), "-D", "data"], None, None))
    assert refusal("subprocess.Popen", (str(binary), [str(binary), "--version"], None, None)) is None
    script = tmp_path / "bin" / "pgbouncer"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\necho 'PgBouncer 1.24.1'\n")
    assert refusal("subprocess.Popen", (str(script), [str(script), "pgbouncer.ini"], None, None)) is None
