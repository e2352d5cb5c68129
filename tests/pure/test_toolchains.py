"""The compilers an agent's build needs (toolchains.py): the first new enough one builds it, an older
one is passed over, and none is one line naming what was found and what to install. Fake compilers:
shell scripts that print a version, no network."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from leakcheck.drivers.agents import toolchains
from leakcheck.drivers.agents.catalogue import CATALOGUE
from leakcheck.model.errors import ProvisionError

ROOT = Path(__file__).parents[2]


def _go(folder: Path, version: str) -> Path:
    folder.mkdir(parents=True)
    program = folder / "go"
    program.write_text(f"#!/bin/sh\necho 'go version go{version} linux/amd64'\n")
    program.chmod(0o755)
    return program


@pytest.fixture
def only(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No usual place and no Debian place: only PATH, as each test sets it (nothing found stays cached)."""
    monkeypatch.setitem(toolchains.TOOLS, "go", toolchains.Tool("go", (), "", ("version",), "install Go >= {minimum}"))
    toolchains.find.cache_clear()
    yield
    toolchains.find.cache_clear()


def test_an_older_go_first_on_path_is_passed_over_for_a_new_enough_one(
    only: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new = _go(tmp_path / "debian", "1.19.8"), _go(tmp_path / "local", "1.26.8")
    monkeypatch.setenv("PATH", f"{old.parent}:{new.parent}")
    found = toolchains.find("go", "1.25", "pgx-v5")
    assert (found.path, str(found.version)) == (new, "1.26.8")


def test_no_go_new_enough_is_one_line_naming_what_was_found_and_what_to_install(
    only: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = _go(tmp_path / "debian", "1.19.8")
    monkeypatch.setenv("PATH", str(old.parent))
    with pytest.raises(ProvisionError) as caught:
        toolchains.find("go", "1.25", "pgx-v5")
    said = str(caught.value)
    assert "\n" not in said
    assert said == f"the pgx-v5 agent is built with go >= 1.25, found {old} (1.19.8): install Go >= 1.25"


def test_the_oldest_go_a_catalogue_row_accepts_is_the_one_its_go_mod_says() -> None:
    for shipped in CATALOGUE:
        for name, minimum in shipped.spec.tools:
            if name == "go":
                go_mod = (ROOT / "leakcheck" / "drivers" / "agents" / shipped.spec.id / "go.mod").read_text()
                line = re.search(r"^go ([0-9.]+)$", go_mod, re.MULTILINE)
                assert line and line.group(1).removesuffix(".0") == minimum, shipped.spec.id
