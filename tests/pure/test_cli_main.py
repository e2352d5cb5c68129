"""The `leakcheck` command itself: what it says about its own release."""

from __future__ import annotations

import importlib.metadata

import pytest

from leakcheck.cli.main import main


def test_leakcheck_version_prints_the_installed_release_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"leakcheck {importlib.metadata.version('leakcheck')}\n"
