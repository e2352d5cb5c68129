"""The catalog of the pgjdbc, PDO, ruby-pg and pgx agents against the files that ship and install them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from leakcheck.drivers.agents.catalogue import CATALOGUE
from leakcheck.drivers.agents.client import _shaped
from leakcheck.drivers.agents.spec import AgentSpec
from leakcheck.model.errors import NotApplicable

#: the agents built from their spec alone (the npm ones are tested in test_agents.py with their packages)
SPECS = tuple(s.spec for s in CATALOGUE if not s.spec.npm)

ROOT = Path(__file__).parents[2]


def bootstrap_group(name: str) -> set[str]:
    text = (ROOT / "scripts" / "bootstrap").read_text()
    found = re.search(rf"^{name}=\(([^)]*)\)", text, re.MULTILINE)
    assert found, f"scripts/bootstrap has no {name}"
    return set(found.group(1).split())


def test_bootstrap_installs_what_the_main_job_needs_and_no_agents_toolchain() -> None:
    # It installed 97 packages (Go, PHP, Ruby, pgjdbc) the main job does not use; each driver's now come
    # when that driver is asked for (drivers/agents/install.py).
    assert bootstrap_group("BUILD_DEPS") == {"build-essential", "pkg-config", "libevent-dev", "libssl-dev",
                                             "libc-ares-dev"}
    text = (ROOT / "scripts" / "bootstrap").read_text()
    own = {"python3-venv"}  # leakcheck's own .venv needs it (where Debian's python3 lacks ensurepip); so do the ORMs'
    assert not [pkg for spec in SPECS for pkg in spec.apt if pkg in text and pkg not in own]
    assert "javac" not in text  # nor the JDK pgjdbc's agent is built with


#: the Debian package that brings each language's runtime (and its compiler, where the agent is built)
RUNTIME = {"java": "default-jdk-headless", "php": "php8.2-cli", "ruby": "ruby-pg", "go": "golang-go",
           "python": "python3-venv"}


@pytest.mark.parametrize("spec", SPECS, ids=[spec.id for spec in SPECS])
def test_an_agents_packages_bring_its_runtime_so_asking_for_the_driver_is_enough(spec: AgentSpec) -> None:
    # pgjdbc's build runs javac: its JDK came from bootstrap, not from the packages installed with the driver.
    # An agent built with a compiler Debian has none new enough of (pgx v5: Go 1.25, sqlx: Rust 1.94) names it
    # in `tools` instead: the one line to install it is the error (toolchains.py).
    assert RUNTIME.get(spec.language) in spec.apt or {"go": "go", "rust": "cargo"}[spec.language] in dict(spec.tools)


@pytest.mark.parametrize("spec", SPECS, ids=[spec.id for spec in SPECS])
def test_every_source_an_agent_names_is_in_its_folder(spec: AgentSpec) -> None:
    folder = ROOT / "leakcheck" / "drivers" / "agents" / spec.id
    assert spec.sources and all((folder / name).is_file() for name in spec.sources)


@pytest.mark.parametrize("spec", SPECS, ids=[spec.id for spec in SPECS])
def test_an_agent_names_each_setting_once_and_starts_from_its_folder(spec: AgentSpec) -> None:
    names = [name for name, _ in spec.settings]
    assert len(names) == len(set(names))
    assert any("{dir}" in part for part in spec.run)


JAVA = tuple(spec for spec in SPECS if spec.language == "java")


def _classpath(argv: tuple[str, ...]) -> str:
    return argv[argv.index("-cp") + 1]


@pytest.mark.parametrize("spec", JAVA, ids=[spec.id for spec in JAVA])
def test_a_jvm_agent_starts_with_the_class_archive_its_build_made_with_the_same_classpath(spec: AgentSpec) -> None:
    # A JVM maps an archive (AppCDS) only for the classpath it was made with, jars only, and otherwise silently
    # loads every class again: pgjdbc-maven's first archive run named lib/postgresql.jar, its run lib/* (with
    # checker-qual.jar), and nothing was mapped.
    archived = [part for part in spec.run if part.startswith("-XX:SharedArchiveFile=")]
    assert len(archived) == 1
    made = [command for command in spec.build
            if f"-XX:ArchiveClassesAtExit={archived[0].split('=', 1)[1]}" in command]
    assert len(made) == 1
    assert _classpath(made[0]) == _classpath(spec.run)
    assert not any(entry.startswith("{dir}") or entry.endswith("/") for entry in _classpath(spec.run).split(":"))


def test_an_agent_with_a_startup_setting_gets_the_parameter_as_its_own_setting() -> None:
    node = next(s for s in CATALOGUE if s.spec.id == "node-postgres")
    settings = node.startup_settings(("search_path", "lc_s"))
    assert settings == {"options": "-c search_path=lc_s"}
    assert set(settings) <= {name for name, _ in node.spec.settings}


def test_an_agent_without_a_startup_setting_makes_the_probe_not_applicable() -> None:
    pdo = next(s for s in CATALOGUE if s.spec.id == "pdo")
    with pytest.raises(NotApplicable, match="pdo agent has no setting that sends search_path"):
        pdo.startup_settings(("search_path", "lc_s"))


def test_an_array_text_form_is_not_a_protocol_value_inside_rows_but_a_json_array_is() -> None:
    assert _shaped(["PGBOUNCER_1", None, [1, 2.5, True]]) and _shaped("{PGBOUNCER_1}")
    assert not _shaped({"name": "PGBOUNCER_1"}) and not _shaped([{"a": 1}])
