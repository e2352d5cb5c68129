"""Expected verdicts kept in matrices/*.json: the pre-upgrade gate (pure except load/save)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from .errors import UsageError
from .verdicts import Outcome, Route, Verdict

#: JSON layout: {"format": 1, "verdicts": {"pg16/pgbouncer1.24/psycopg/search_path": "leaks", ...}}
FORMAT = 1


def key(outcome: Outcome) -> str:
    """PostgreSQL major and PgBouncer major.minor, so patch releases share expectations."""
    pg = outcome.pg.split(".")[0]
    bouncer = ".".join(outcome.bouncer.split(".")[:2])
    return f"pg{pg}/pgbouncer{bouncer}/{outcome.driver}/{outcome.probe}"


def load(path: Path) -> dict[str, Verdict]:
    try:
        data = json.loads(path.read_text())
        verdicts = data["verdicts"]
        return {str(k): Verdict(v) for k, v in verdicts.items()}
    except FileNotFoundError:
        raise UsageError(f"--expect: {path} does not exist; record one with --record={path}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(
            f"--expect: {path} is not a leakcheck matrix ({exc}); re-record it with --record={path}"
        ) from None


def dump(outcomes: Iterable[Outcome]) -> str:
    verdicts = {key(o): o.verdict.value for o in outcomes if o.route is Route.TRANSACTION}
    return json.dumps({"format": FORMAT, "verdicts": dict(sorted(verdicts.items()))}, indent=2) + "\n"


def compare(outcome: Outcome, expected: Mapping[str, Verdict]) -> str | None:
    """None when the measured verdict is the expected one, else one line saying how it differs."""
    want = expected.get(key(outcome))
    if want is None:
        return f"no expected verdict for {key(outcome)} (measured {outcome.verdict.value}); record one with --record"
    if want is outcome.verdict:
        return None
    return f"expected {want.value}, measured {outcome.verdict.value}: {outcome.evidence}"
