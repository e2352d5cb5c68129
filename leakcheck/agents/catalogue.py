"""The agents leakcheck ships: each driver id, its spec, and how its statements are named.

A driver's statement names matter to the prepared probes: "B saw A's statement under the name A's
driver gave it" needs that name, as a SQL condition on pg_prepared_statements.name (PgBouncer's
own names, PGBOUNCER_n, must not match it).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..target import NATIVE_DRIVERS
from .spec import AgentSpec

_NODE = ("node", "{dir}/agent.js")


@dataclass(frozen=True)
class Shipped:
    """One agent of the catalogue."""

    spec: AgentSpec
    #: a SQL condition on `name` that holds for the names this driver gives its prepared statements
    statement_names: str


CATALOGUE: tuple[Shipped, ...] = (
    # node-postgres: a query config with `name` (the agent names them stmt_1, stmt_2... per connection)
    Shipped(AgentSpec("node-postgres", "node", ("agent.js",), npm=("pg@8",), run=_NODE),
            "name LIKE 'stmt\\_%'"),
    # postgres.js: prepares every query by default, named by a random per-connection prefix and a counter
    Shipped(AgentSpec("postgres-js", "node", ("agent.js",), npm=("postgres@3",), run=_NODE,
                      settings=(("prepare", "true"),)),
            "name ~ '^[0-9a-z]+$'"),
    # d-more: pgjdbc, pdo, ruby-pg and pgx go here, one Shipped(...) each.
)


def shipped(driver_id: str) -> Shipped | None:
    """The catalogue's entry for a driver id, or None (psycopg, asyncpg and unknown ids)."""
    return next((s for s in CATALOGUE if s.spec.id == driver_id), None)


def known_drivers() -> tuple[str, ...]:
    """Every driver id --drivers takes: this process's own, then the agents'."""
    return (*(d.value for d in NATIVE_DRIVERS), *(s.spec.id for s in CATALOGUE))
