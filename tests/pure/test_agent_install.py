"""A driver's toolchain comes with the driver: its Debian packages are installed when it is asked for (as root:
apt-get update, then install, said in one line), never by set-up; not root, the error is the line to run."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest

from leakcheck.drivers.agents import install
from leakcheck.drivers.agents.catalogue import shipped
from leakcheck.model.errors import ProvisionError

PGJDBC = shipped("pgjdbc")
assert PGJDBC is not None


def test_as_root_a_drivers_missing_packages_are_installed_after_apt_get_update_and_said(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    ran: list[list[str]] = []
    monkeypatch.setattr(install, "missing_apt", lambda spec: ["default-jdk-headless", "libpostgresql-jdbc-java"])
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(install, "_run", lambda argv, cwd, what, env=None: ran.append(argv))
    with caplog.at_level(logging.INFO, logger="leakcheck"):
        install.install_apt(PGJDBC.spec)
    # A fresh machine has no package lists: install alone failed there once bootstrap no longer updated them.
    assert ran == [["apt-get", "update", "-qq"],
                   ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "default-jdk-headless",
                    "libpostgresql-jdbc-java"]]
    assert ("installing the pgjdbc agent's java toolchain with apt-get: default-jdk-headless "
            "libpostgresql-jdbc-java") in caplog.text


def test_not_root_the_error_is_the_one_apt_get_line_to_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(install, "missing_apt", lambda spec: ["default-jdk-headless"])
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(ProvisionError) as raised:
        install.install_apt(PGJDBC.spec)
    assert str(raised.value) == ("the pgjdbc agent needs Debian packages: run `sudo apt-get install -y "
                                 "default-jdk-headless` (or `leakcheck prepare --drivers=pgjdbc` as root)")


def test_nothing_missing_runs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(install, "missing_apt", lambda spec: [])
    monkeypatch.setattr(install, "_run", lambda *args, **kwargs: pytest.fail("ran apt-get"))
    install.install_apt(PGJDBC.spec)


DJANGO = shipped("django")
assert DJANGO is not None


def test_a_pip_agent_is_made_in_a_venv_of_debians_python3_with_its_pinned_packages(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    ran: list[list[str]] = []
    monkeypatch.setattr(install, "_run", lambda argv, cwd, what, env=None: ran.append(argv))

    class Started:
        hello = {"release": "5.2.19", "runtime": "python 3.11.2"}

        def stop(self) -> None:
            pass

    monkeypatch.setattr(install.Installed, "start", lambda self, **_: Started())
    made = install._make(DJANGO.spec, tmp_path, "key")
    venv = ran[0][3]
    assert ran[0] == ["/usr/bin/python3", "-m", "venv", venv] and venv.endswith("/venv")
    assert ran[1][:4] == [f"{venv}/bin/python", "-m", "pip", "install"]
    assert ran[1][-len(DJANGO.spec.pip):] == list(DJANGO.spec.pip) and all("==" in p for p in DJANGO.spec.pip)
    assert made.folder == tmp_path / "key" and (made.folder / "agent.py").is_file()
    assert str(made.release) == "5.2.19" and made.argv()[0] == f"{tmp_path / 'key'}/venv/bin/python"


def test_a_pip_agents_cache_key_follows_debians_python3_not_its_venv(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    # Its run command starts {dir}/venv/bin/python, which is no program on PATH: the key hashed no runtime.
    first = install._key(DJANGO.spec)
    other = tmp_path / "python3"
    other.write_text("another python\n")
    monkeypatch.setattr(install, "PYTHON", str(other))
    assert install._key(DJANGO.spec) != first
