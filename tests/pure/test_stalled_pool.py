"""A step past its bound is a stalled pool only when a server connection sits in a transaction nobody ended:
one the probe itself keeps open on purpose (B on A's server while A is away) is no stall, and the timeout
stays an error (a slow second server login on a loaded machine is not the pooler's doing)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from leakcheck.model.target import Route
from leakcheck.model.verdicts import Proof, ServerId
from leakcheck.probes.outcomes import Stalled
from leakcheck.probes.scenario import Scenario

SERVER = ServerId(7, "1")


@dataclass
class _Labelled:
    label: str


@dataclass
class _Holding:
    """A witness that shows SERVER idle in transaction at every look."""

    def holding(self, servers: set[ServerId]) -> list[tuple[ServerId, str]]:
        return [(SERVER, "idle in transaction")] if SERVER in servers else []

    def busy(self, server: ServerId) -> str | None:
        return None

    def terminate(self, server: ServerId) -> None:
        pass


def _scenario() -> Scenario:
    s = Scenario(a=_Labelled("A"), b=_Labelled("B"), route=Route.TRANSACTION,  # type: ignore[arg-type]
                 witness=_Holding())  # type: ignore[arg-type]
    s.proofs.append(Proof(client="B", step="holds A's server", server=SERVER))
    return s


def test_a_server_the_probe_itself_keeps_in_a_transaction_is_no_stalled_pool_and_the_timeout_stays_an_error() -> None:
    s = _scenario()
    s._held_open.add(SERVER)  # B holds A's server on purpose (a_on_another_server)
    s._stalled(s.a, "A's step away")  # no Stalled: the caller's TimeoutError, an error, is what remains


def test_a_server_left_in_a_transaction_nobody_ended_is_a_stalled_pool() -> None:
    s = _scenario()
    with pytest.raises(Stalled, match="stayed idle in transaction after B.s .*the pool stalled"):
        s._stalled(s.a, "A's step")
