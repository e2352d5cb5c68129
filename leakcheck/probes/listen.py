"""LISTEN/NOTIFY: whose notification is it?"""

from __future__ import annotations

from ..verdicts import Observation
from .base import Probe, Scenario, probe


@probe("listen_notify", "LISTEN (is A notified? does B get A's notification?)")
async def listen_notify(s: Scenario) -> Observation:
    channel = s.name("chan")
    # A: subscribes; the registration lives on whatever server connection A used.
    await s.a.execute(f"LISTEN {channel}")
    await s.shared("after A's LISTEN")
    # B: sends a notification on A's channel (B never listened).
    await s.b.execute(f"NOTIFY {channel}, 'from_b'")
    # A: waits for it; B: anything delivered to it?
    a_got = [n for n in await s.a.wait_for_notifications(0.5) if n.channel == channel]
    b_got = [n for n in await s.b.wait_for_notifications(0.05) if n.channel == channel]
    await s.a.execute(f"UNLISTEN {channel}")
    return Observation(
        evidence=f"A ran LISTEN {channel}; B ran NOTIFY; A received {len(a_got)}, "
        f"B (which never listened) received {len(b_got)} notification(s)",
        leaked=bool(b_got),
        lost=not a_got,
    )


PROBES: tuple[Probe, ...] = (listen_notify,)
