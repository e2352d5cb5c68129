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
    #: files of leakcheck/drivers/agents/<id>/ the agent is built from
    sources: tuple[str, ...]
    #: Debian packages it needs, its runtime and build tools included (installed when the driver is asked
    #: for, as root with apt-get; else the error is the apt-get line to run)
    apt: tuple[str, ...] = ()
    #: npm packages it needs, installed into the agent's cache folder ("pg@8")
    npm: tuple[str, ...] = ()
    #: commands run once in the agent's cache folder; "{dir}" is that folder
    build: tuple[tuple[str, ...], ...] = ()
    #: the command that starts one agent process; "{dir}" is its cache folder
    run: tuple[str, ...] = ()
    #: the driver settings it accepts (--driver-set ID:NAME=V), with their defaults as the driver has them
    settings: tuple[tuple[str, str], ...] = ()
    #: startup parameters the driver always sends that PgBouncer refuses unless it is told to ignore
    #: them (`ignore_startup_parameters`, as every team running this driver through PgBouncer sets)
    ignored_startup: tuple[str, ...] = ()
