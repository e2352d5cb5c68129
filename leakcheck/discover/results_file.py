"""`discover --results`: a run's findings as a JSON file, the source of the docs' findings table.

A sibling of the matrix's results file (results/results.py), not that format: a matrix outcome is a
probe's verdict on a target, and `leakcheck merge` judges it by its probe; a finding is a sequence of
steps with what differed, labelled by the probes it maps to (or none). Same envelope and rules: a
schema name and version, written in one step (config/output_files.py) only after a run that measured,
its path checked before any server starts. `driver` is the driver with its `--driver-set` settings
as ids show them (`pgjdbc[prepareThreshold=0]`; the driver alone at its defaults). Layout (version 1):

    {"schema": "leakcheck-discovery", "version": 1,
     "cell": "PostgreSQL 16.14, PgBouncer 1.24.1 (pool_mode=transaction, default_pool_size=1)",
     "driver": "psycopg", "route": "transaction", "seed": 1, "budget": 30.0,
     "sequences": 812, "rounds": 9, "stopped": "budget",
     "findings": [{"signature": "...", "known": false, "probes": [], "unlisted": ["set:work_mem"],
                   "accepted": null, "round": 1, "shrunk": true, "reproduced": [2, 2],
                   "steps": ["A:set(work_mem)", "B:observe"],
                   "diffs": [{"step": 1, "who": "B", "key": "setting:work_mem",
                              "through_pooler": "'8MB'", "direct": "'4MB'"}]}],
     "before_any_op": [{"who": "A or B", "key": "reported:DateStyle", "through_pooler": "'ISO'",
                        "direct": "'ISO, MDY'"}]}

`before_any_op` (added within version 1; a file without it had none) is what the route showed differently
before any op, on the empty sequences measured first (Differential.learn_start): the connections' start,
left out of every comparison while a client showed those values and no op may have given them; `who` is
"A or B" where both clients are one application (a start of either is the other's), else the client.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from leakcheck.config import inputs
from leakcheck.config.output_files import write_atomic
from leakcheck.model.errors import UsageError
from leakcheck.results.results import check_schema_target

if TYPE_CHECKING:
    from leakcheck.discover.compare import Diff
    from leakcheck.discover.findings import Finding

SCHEMA, VERSION = "leakcheck-discovery", 1
OPTION = "--results"


@dataclass(frozen=True)
class Found:
    """One finding as the file keeps it."""

    signature: str
    known: bool
    probes: tuple[str, ...]
    unlisted: tuple[str, ...]
    steps: tuple[str, ...]  #: the shrunk sequence, e.g. A:set(work_mem)
    accepted: str | None = None


@dataclass(frozen=True)
class Run:
    """One discovery run as the file keeps it (what the docs table shows of it)."""

    cell: str
    driver: str
    route: str
    seed: int
    budget: float
    sequences: int
    findings: tuple[Found, ...]


def dumps(document: Mapping[str, Any]) -> str:
    return json.dumps({"schema": SCHEMA, "version": VERSION, **document}, indent=1, ensure_ascii=False) + "\n"


def check_target(path: Path) -> None:
    """Before any server: `path` can be written, and a file there is a discovery results file."""
    check_schema_target(path, OPTION, "findings.json", SCHEMA, "a leakcheck discovery results file")


def save(path: Path, document: Mapping[str, Any]) -> str:
    write_atomic(path, dumps(document))
    return f"wrote {len(document.get('findings', ()))} finding(s) to {path}"


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where} is not a list of strings")
    return tuple(value)


def load(path: Path, option: str) -> Run:
    """A discovery results file; anything else is a one-line UsageError naming `path`."""
    where = f"{option}: {path}"
    inputs.check_file(path, where)
    try:
        data: Any = inputs.parse(json.loads, inputs.read_text(path, where), where)
    except (OSError, ValueError) as exc:
        raise UsageError(f"{where}: cannot read it as JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or data.get("version") != VERSION:
        raise UsageError(f"{where} is not a leakcheck discovery results file ({SCHEMA}, version {VERSION}); "
                         "give a file written by `leakcheck discover --results`")
    try:
        found = tuple(Found(str(f["signature"]), bool(f["known"]), _strings(f["probes"], "probes"),
                            _strings(f["unlisted"], "unlisted"), _strings(f["steps"], "steps"), f.get("accepted"))
                      for f in data["findings"])
        return Run(str(data["cell"]), str(data["driver"]), str(data["route"]), int(data["seed"]),
                   float(data["budget"]), int(data["sequences"]), found)
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{where}: a malformed entry ({type(exc).__name__}: {exc})") from None


def document(cell: str, driver: str, route: str, seed: int, budget: float, sequences: int, rounds: int,
             stopped: str, findings: Sequence[Mapping[str, Any]], start: Sequence[Diff] = (),
             same_app: bool = True) -> dict[str, Any]:
    """The file's body (without schema and version); `start`, what the route showed differently before any op
    (Differential.learn_start), each without a step, and of either client where both are one application."""
    return {"cell": cell, "driver": driver, "route": route, "seed": seed, "budget": budget, "sequences": sequences,
            "rounds": rounds, "stopped": stopped, "findings": list(findings),
            "before_any_op": [{"who": "A or B" if same_app else str(d.who), "key": d.key, "through_pooler": d.subject,
                               "direct": d.reference} for d in start]}


def entry(f: Finding, accepted: str | None) -> dict[str, Any]:
    """One finding as the file keeps it: its label, its steps and what differed (as the script shows)."""
    return {"signature": f.signature, "known": f.known, "probes": list(f.probes), "unlisted": list(f.unlisted),
            "accepted": accepted, "round": f.round, "shrunk": f.shrunk, "reproduced": list(f.reproduced),
            "steps": [str(op) for op in f.ops],
            "diffs": [{"step": d.index + 1, "who": str(d.who), "key": d.key, "through_pooler": d.subject,
                       "direct": d.reference} for d in f.diffs]}
