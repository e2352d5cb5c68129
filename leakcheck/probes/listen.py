"""LISTEN/NOTIFY: whose notification is it?

Absence is proven with sentinels, not waits: notifications reach a session in commit order, so
once a client has its own later sentinel, an earlier notification it lacks will never come.
"""

from __future__ import annotations

from leakcheck.drivers.interface import Client
from leakcheck.model.errors import ProbeError
from leakcheck.model.verdicts import Observation
from leakcheck.probes.base import Probe, probe
from leakcheck.probes.scenario import Scenario


async def sentinel(s: Scenario, client: Client, channel: str) -> bool:
    """The client notifies itself on its own channel, in one SQL transaction block (the harness's proof of
    absence, no application's call: a pooler's reset between two statements must not eat it, and the
    driver's own transaction statements must not collide with another client's: pgjdbc's COMMIT is a
    named statement of its own past its prepareThreshold); True when that arrived (by its COMMIT's end)."""
    for step, sql in (("sentinel", "BEGIN"), ("sentinel", f"LISTEN {channel}"),
                      ("sentinel", f"NOTIFY {channel}, 'sentinel'"), ("sentinel", "COMMIT")):
        done = await s.run(client, step, sql)
        if done.failed:
            await s.run(client, step, "ROLLBACK")
            raise ProbeError(f"{client.label} could not notify itself ({sql}): {done}")
    return any(n.channel == channel for n in client.notifications)


@probe("listen_notify", "LISTEN (is A notified? does B get a notification meant for A?)")
async def listen_notify(s: Scenario) -> Observation:
    channel, a_mark, b_mark = s.name("chan"), s.name("sa"), s.name("sb")
    # A: subscribes; the registration lives on whatever server connection A used.
    await s.change(s.a, "LISTEN", f"LISTEN {channel}")
    # B: holds the server (a transaction of its own) while C, a session outside the pool, notifies A's channel.
    await s.begin(s.b, "holds the server")
    await s.observe(s.b, "holds the server", "1")
    c = await s.c()
    await c.execute(f"NOTIFY {channel}, 'from_c'")
    await s.commit(s.b, "holds the server")
    # B, then A: each takes a sentinel, which arrives after C's notification would have.
    b_sentinel = await sentinel(s, s.b, b_mark)
    a_sentinel = await sentinel(s, s.a, a_mark)
    if not (a_sentinel and b_sentinel):
        return Observation(evidence=f"a sentinel notification did not arrive (A: {a_sentinel}, B: {b_sentinel})",
                           broke="LISTEN/NOTIFY did not deliver a client's own notification")
    a_got = sum(n.channel == channel for n in s.a.notifications)
    b_any = sum(n.channel == channel for n in s.b.notifications)
    await s.run(s.a, "UNLISTEN", "UNLISTEN *")
    return Observation(
        evidence=f"A: LISTEN {channel}. C notified it while B held the server. A received {a_got}, "
        f"B (which never listened) {b_any} notification(s), both proven final by sentinels",
        leaked=b_any > 0,
        lost=a_got == 0,
    )


PROBES: tuple[Probe, ...] = (listen_notify,)
