"""What a report says about the run it shows, in its header: when, which leakcheck, on which servers.

A report read later (a CI artifact, a pull-request comment) must say what produced it: the date and
time of the run (UTC), leakcheck's release, and each server binary with where it came from, as the
run's backend describes them ("PostgreSQL 16.14: /var/cache/leakcheck/postgres/16.14/bin (cache)").
`leakcheck merge` knows only what the results files hold: the releases, not where they came from.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from leakcheck.model.verdicts import Outcome
from leakcheck.model.versions import leakcheck_release


@dataclass(frozen=True)
class About:
    """A report's header, made by the caller that ran (or merged) the outcomes."""

    #: when the run ended (or the merge was made), timezone-aware
    when: datetime
    #: leakcheck's release
    leakcheck: str
    #: one line per server binary (and the team's ini, as the run's header says it)
    servers: tuple[str, ...]
    #: how the outcomes came: "measured", or "merged" (from results files)
    what: str = "measured"
    #: what follows the leakcheck release: "" for a run, " from 3 results files measured" for a merge
    source: str = ""

    @classmethod
    def now(cls, servers: Iterable[str], what: str = "measured", source: str = "") -> About:
        return cls(datetime.now(UTC), leakcheck_release(), tuple(servers), what, source)

    def headline(self) -> str:
        """`measured 2026-12-06 10:32 UTC by leakcheck 0.1.0`."""
        when = f"{self.when.astimezone(UTC):%Y-%m-%d %H:%M} UTC"
        return f"{self.what} {when} by leakcheck {self.leakcheck}{self.source}"


def releases(outcomes: Sequence[Outcome]) -> list[str]:
    """The servers' releases the outcomes name, for a report made from results files (which do not say
    where each binary came from)."""
    pgs = sorted({o.pg for o in outcomes})
    lines = [f"PostgreSQL {', '.join(map(str, pgs))} (where each came from is not in a results file)"] if pgs else []
    poolers: dict[str, set[str]] = {}
    for o in outcomes:
        if o.pooler is not None:
            versions = [str(v) for v in o.pooler.fleet] or ([str(o.pooler.version)] if o.pooler.version else [])
            poolers.setdefault(o.pooler.kind.product, set()).update(versions or [o.pooler.label()])
    lines += [f"{product} {', '.join(sorted(versions))}" for product, versions in sorted(poolers.items())]
    return lines
