"""What a driver sends at connect: a setting in the startup packet (libpq's options=-c, asyncpg's
server_settings, an agent's `options`, catalogue.py). The runner connects A with it, B without."""

from __future__ import annotations

from leakcheck.model.verdicts import Observation
from leakcheck.probes.base import Probe, probe, said
from leakcheck.probes.scenario import Scenario

#: The schema A's startup packet names; it need not exist (search_path takes any name).
STARTUP_SCHEMA = "lc_startup_schema"


@probe("startup_parameters", "a setting sent at connect (options=-c search_path=..., server_settings)",
       startup=("search_path", STARTUP_SCHEMA))
async def startup_parameters(s: Scenario) -> Observation:
    # A: connected with search_path=lc_startup_schema in its startup packet (a pooler that refused it
    # made the probe not applicable, in the pooler's words): does its session have it?
    mine = await s.observe(s.a, "read search_path", "current_setting('search_path')")
    # B: connected without it, on the server A used: does B's session have A's?
    seen = await s.observe(s.b, "read search_path", "current_setting('search_path')")
    # A: after B used the server, its own setting again.
    again = await s.observe(s.a, "read search_path again", "current_setting('search_path')")
    return Observation(
        evidence=f"A connected with search_path={STARTUP_SCHEMA} and read {said(mine)}; B read {said(seen)}; "
        f"A again {said(again)}",
        leaked=STARTUP_SCHEMA in str(seen),
        lost=STARTUP_SCHEMA not in str(mine) or STARTUP_SCHEMA not in str(again),
    )


PROBES: tuple[Probe, ...] = (startup_parameters,)
