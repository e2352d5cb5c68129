"""How leakcheck installs, builds and starts one driver agent (a client process of its own language).

An agent's sources live in `leakcheck/drivers/agents/<id>/`; leakcheck copies them into its cache, runs
`build` there once per (sources, runtime) and starts `run` once per lane and client slot. The
protocol it speaks is docs/agent-protocol.md.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AgentSpec:
    #: the driver id, as in --drivers and every cell id ("pgjdbc", "node-postgres")
    id: str
    #: the runtime, for messages ("java", "node", "php", "ruby", "go")
    language: str
    #: files the agent is built from, relative to leakcheck/drivers/agents/<id>/ ("../pgjdbc/Agent.java":
    #: another agent's file, shared), each copied into its cache folder under its own name
    sources: tuple[str, ...]
    #: Debian packages it needs, its runtime and build tools included (installed when the driver is asked
    #: for, as root with apt-get; else the error is the apt-get line to run)
    apt: tuple[str, ...] = ()
    #: npm packages it needs, installed into the agent's cache folder ("pg@8")
    npm: tuple[str, ...] = ()
    #: PyPI packages it needs, pinned ("Django==5.2.19"), pip-installed into a virtual environment of
    #: Debian's /usr/bin/python3 made in its cache folder ({dir}/venv: run it as "{dir}/venv/bin/python")
    pip: tuple[str, ...] = ()
    #: commands run once in the agent's cache folder; "{dir}" is that folder, "{cache}" the agent's own
    #: downloads and build caches kept across its builds (CACHE/agents/<id>/.build-cache: Go modules,
    #: cargo's registry and target folder, a Maven repository), "{go}" / "{go_version}" a tool of `tools`
    build: tuple[tuple[str, ...], ...] = ()
    #: the build commands' environment on top of leakcheck's own (values with the placeholders of `build`)
    build_env: tuple[tuple[str, str], ...] = ()
    #: seconds each build command may take (a first cargo build compiles a hundred crates on 2 shared cores)
    build_timeout: float = 300.0
    #: compilers its build needs that Debian's archive has none new enough of, each with the oldest
    #: release that builds it: ("go", "1.25") (toolchains.py finds them)
    tools: tuple[tuple[str, str], ...] = ()
    #: the command that starts one agent process; "{dir}" is its cache folder
    run: tuple[str, ...] = ()
    #: the command of its preloader, if it has one (preload.py: one process per run that loads what the
    #: agent requires once and forks each agent); "{dir}" as in `run`, "{fd}" the preloader's socket
    preload: tuple[str, ...] = ()
    #: the driver settings it accepts (--driver-set ID:NAME=V), with their defaults as the driver has them
    settings: tuple[tuple[str, str], ...] = ()
    #: startup parameters the driver always sends that PgBouncer refuses unless it is told to ignore
    #: them (`ignore_startup_parameters`, as every team running this driver through PgBouncer sets)
    ignored_startup: tuple[str, ...] = ()
