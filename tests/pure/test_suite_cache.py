"""The suite's own cache (tests/support/cache.py): seeded from the user's by hard links, never sharing a write."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cache import SEEDED, seed, use_test_cache

ROOT = Path(__file__).parents[2]


def _users_cache(root: Path) -> Path:
    (root / "postgres" / "16.14" / "bin").mkdir(parents=True)
    (root / "postgres" / "16.14" / "bin" / "postgres").write_text("binary")
    (root / "postgres" / ".16.14.lock").write_text("")
    (root / "templates" / ".build-16.14-x").mkdir(parents=True)
    os.symlink("bin/postgres", root / "postgres" / "16.14" / "link")
    return root


def test_the_test_cache_links_the_users_servers_instead_of_copying_them(tmp_path: Path) -> None:
    users = _users_cache(tmp_path / "users")
    seed(users, tmp_path / "tests")
    binary = tmp_path / "tests" / "postgres" / "16.14" / "bin" / "postgres"
    assert binary.stat().st_ino == (users / "postgres" / "16.14" / "bin" / "postgres").stat().st_ino
    assert os.readlink(tmp_path / "tests" / "postgres" / "16.14" / "link") == "bin/postgres"


def test_locks_and_half_built_folders_are_not_linked(tmp_path: Path) -> None:
    seed(_users_cache(tmp_path / "users"), tmp_path / "tests")
    assert not (tmp_path / "tests" / "postgres" / ".16.14.lock").exists()
    assert not (tmp_path / "tests" / "templates" / ".build-16.14-x").exists()
    assert not [p for p in (tmp_path / "tests").rglob(".seed-*")]


def test_a_file_the_tests_replace_leaves_the_users_copy_as_it_was(tmp_path: Path) -> None:
    users = _users_cache(tmp_path / "users")
    seed(users, tmp_path / "tests")
    replaced = tmp_path / "tests" / "postgres" / "16.14" / "bin" / "postgres"
    fresh = replaced.with_name("new")
    fresh.write_text("rebuilt")
    os.rename(fresh, replaced)  # how the cache writes: a new file renamed into place
    assert (users / "postgres" / "16.14" / "bin" / "postgres").read_text() == "binary"


def test_what_the_test_cache_already_has_is_kept(tmp_path: Path) -> None:
    users = _users_cache(tmp_path / "users")
    ours = tmp_path / "tests" / "postgres" / "16.14" / "bin" / "postgres"
    ours.parent.mkdir(parents=True)
    ours.write_text("the tests' own")
    (users / "pgbouncer").mkdir()
    seed(users, tmp_path / "tests")
    assert ours.read_text() == "the tests' own"
    assert (tmp_path / "tests" / "pgbouncer").is_dir()


def test_the_session_points_leakcheck_cache_at_the_test_cache_not_the_users(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    users = _users_cache(tmp_path / "users")
    monkeypatch.setenv("LEAKCHECK_CACHE", str(users))
    monkeypatch.delenv(SEEDED, raising=False)
    monkeypatch.delenv("LEAKCHECK_TEST_CACHE", raising=False)
    chosen = use_test_cache(os.environ)
    assert chosen == Path(f"{users}-tests") and os.environ["LEAKCHECK_CACHE"] == str(chosen)
    assert (chosen / "postgres" / "16.14" / "bin" / "postgres").read_text() == "binary"


def test_this_session_does_not_use_the_users_cache() -> None:
    assert os.environ.get(SEEDED) == "1"
    assert os.environ["LEAKCHECK_CACHE"].endswith("-tests") or os.environ.get("LEAKCHECK_TEST_CACHE")


def test_the_readmes_main_command_typed_in_the_clone_uses_the_users_cache_not_the_tests(tmp_path: Path) -> None:
    # tests/conftest.py is loaded (the ini's testpaths) but runs no test: the matrix must use the cache it
    # uses typed anywhere else. A cache that is a file stops the run at its first check, naming the cache.
    users = tmp_path / "users-cache"
    users.write_text("not a folder")
    env = {k: v for k, v in os.environ.items() if k not in (SEEDED, "LEAKCHECK_TEST_CACHE")}
    env["LEAKCHECK_CACHE"] = str(users)
    done = subprocess.run([sys.executable, "-m", "pytest", f"--pg={tmp_path / 'no-postgres'}", "--bouncer=1.24",
                           "--probes=timezone"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 4, done.stdout + done.stderr
    assert f"the leakcheck cache {users} is not a folder" in done.stderr
    assert not Path(f"{users}-tests").exists()
