"""Only PgBouncer's and PostgreSQL's own `--version` banners count; real programs that are not them do not."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from leakcheck.model.versions import Version
from leakcheck.provision.sources import banners


@pytest.mark.parametrize(
    ("first_line", "version"),
    [
        ("PgBouncer 1.18.0", "1.18.0"),  # what the cached 1.18.0, 1.24.1 and 1.26.1 print first
        ("PgBouncer 1.24.1", "1.24.1"),
        ("PgBouncer 1.26.1", "1.26.1"),
    ],
)
def test_pgbouncer_s_banner_gives_its_version(first_line: str, version: str) -> None:
    assert banners.banner_version(first_line, banners.PGBOUNCER) == Version.parse(version)


@pytest.mark.parametrize(
    ("first_line", "version"),
    [
        ("postgres (PostgreSQL) 16.14", "16.14"),
        ("postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)", "15.18"),
        ("initdb (PostgreSQL) 18.4", "18.4"),
    ],
)
def test_postgresql_s_banner_gives_its_version(first_line: str, version: str) -> None:
    assert banners.banner_version(first_line, banners.POSTGRES) == Version.parse(version)


@pytest.mark.parametrize(
    "first_line",
    [
        "true (GNU coreutils) 9.1",
        "GNU bash, version 5.2.15(1)-release (x86_64-pc-linux-gnu)",
        "libevent 2.1.12-stable",
        "pgbouncer.ini: 1.24.1",
        "Odyssey 1.5.2",
        "",
    ],
)
def test_other_programs_banners_are_not_pgbouncer_nor_postgresql(first_line: str) -> None:
    assert banners.banner_version(first_line, banners.PGBOUNCER) is None
    assert banners.banner_version(first_line, banners.POSTGRES) is None


def test_bin_true_is_not_pgbouncer_and_the_reply_shows_what_it_printed() -> None:
    reply = banners.ask(["/bin/true"], banners.PGBOUNCER)
    assert reply.version is None
    assert str(reply).startswith("`/bin/true --version` printed 'true (GNU coreutils) ")
    assert "\n" not in str(reply)


def test_bin_bash_is_not_pgbouncer_and_is_never_given_a_config_to_run() -> None:
    reply = banners.ask(["/bin/bash"], banners.PGBOUNCER)
    assert reply.version is None and "GNU bash" in reply.problem


def test_a_program_that_fails_reports_its_exit_code_and_message(tmp_path: Path) -> None:
    script = tmp_path / "fails"
    script.write_text("#!/bin/sh\necho 'error while loading shared libraries: libevent' >&2\nexit 127\n")
    script.chmod(0o755)
    reply = banners.ask([str(script)], banners.PGBOUNCER)
    assert reply.version is None
    assert reply.problem == "exited with code 127 and printed 'error while loading shared libraries: libevent'"


def test_a_program_that_hangs_is_killed_with_everything_it_started(tmp_path: Path) -> None:
    script = tmp_path / "hangs"
    marker = tmp_path / "pid"
    # Its child keeps the output pipe open: waiting for end of output alone would hang for 30 s.
    script.write_text(f"#!/bin/sh\nsleep 30 &\necho $! > {marker}\nwait\n")
    script.chmod(0o755)
    started = time.monotonic()
    # 2 s: long enough for the shell to start its child and write the marker on a loaded machine.
    reply = banners.ask([str(script)], banners.PGBOUNCER, timeout=2.0)
    assert time.monotonic() - started < 10
    assert reply.version is None and reply.problem == "did not finish within 2 s"
    sleeper = int(marker.read_text())
    # SIGKILL reaches the whole group at once, but the sleeper, which nobody waits for, may still be
    # dying for a moment on a loaded machine (seen in a full run): it has 2 s to be gone.
    deadline = time.monotonic() + 2.0
    while _alive(sleeper) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _alive(sleeper)


def test_a_program_is_asked_once_until_its_file_changes(tmp_path: Path) -> None:
    script = tmp_path / "pgbouncer"
    script.write_text("#!/bin/sh\necho 'PgBouncer 1.24.1'\n")
    script.chmod(0o755)
    assert banners.ask([str(script)], banners.PGBOUNCER).version == Version((1, 24, 1))
    script.write_text("#!/bin/sh\necho 'PgBouncer 1.24.2'\n")  # same size, new inode times
    os.utime(script, ns=(0, 1))
    assert banners.ask([str(script)], banners.PGBOUNCER).version == Version((1, 24, 2))


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_truncated_program_is_found_out_before_it_is_run(tmp_path: Path) -> None:
    copy = tmp_path / "true"
    data = Path("/bin/true").read_bytes()
    copy.write_bytes(data)
    copy.chmod(0o755)
    assert banners.elf_problem(str(copy)) == ""
    copy.write_bytes(data[: len(data) - 100])  # the end of a download that broke off
    assert banners.elf_problem(str(copy)).startswith(f"{copy} is truncated ({len(data) - 100} bytes")
    reply = banners.ask([str(copy)], banners.PGBOUNCER)
    assert reply.version is None and reply.problem.startswith("was not run: ")
