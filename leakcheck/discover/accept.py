"""`discover --accept=FILE`: findings a team has accepted, by signature, each with its reason (pure).

The file is TOML or JSON (by its suffix: .toml, else JSON), a list of entries:

    [[accepted]]                                   # TOML
    signature = "setting:work_mem"                 # as `discover` prints it ("signature ...")
    reason = "work_mem is set per transaction in our code"

    {"accepted": [{"signature": "setting:work_mem", "reason": "..."}]}   # JSON (a bare list too)

`--fail-on` says which findings fail the run (exit 1): `new` (the default) those no probe lists,
`any` every finding; an accepted signature never fails it. A bad file is one line before any server.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from leakcheck.discover.findings import Finding
from leakcheck.model.errors import UsageError

FAIL_ON = ("new", "any")


def load(path: Path) -> dict[str, str]:
    """Signature -> reason, from the file at `path`."""
    option = f"--accept={path}"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{option}: cannot read it ({exc.__class__.__name__}: {exc})") from None
    try:
        data: Any = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        kind = "TOML" if path.suffix == ".toml" else "JSON (name it .toml for TOML)"
        raise UsageError(f"{option}: not valid {kind}: {exc}") from None
    return parse(data, option)


def parse(data: Any, option: str) -> dict[str, str]:
    entries = data.get("accepted") if isinstance(data, dict) else data
    if not isinstance(entries, list):
        raise UsageError(f"{option}: expected a list of accepted findings (an `accepted` list), "
                         f"got {type(data).__name__}")
    accepted: dict[str, str] = {}
    for n, entry in enumerate(entries, 1):
        if not isinstance(entry, dict) or set(entry) != {"signature", "reason"}:
            raise UsageError(f"{option}: entry {n} must have exactly `signature` and `reason`, got {entry!r}")
        signature, reason = entry["signature"], entry["reason"]
        if not isinstance(signature, str) or not signature.strip() or not isinstance(reason, str) or not reason.strip():
            raise UsageError(f"{option}: entry {n}: `signature` and `reason` must be non-empty texts")
        if signature in accepted:
            raise UsageError(f"{option}: entry {n}: signature {signature!r} is listed twice")
        accepted[signature] = reason.strip()
    return accepted


def failing(findings: Iterable[Finding], fail_on: str, accepted: dict[str, str]) -> list[Finding]:
    """The findings that fail the run: new ones (or, with `any`, all) whose signature is not accepted."""
    return [f for f in findings if f.signature not in accepted and (fail_on == "any" or not f.known)]
