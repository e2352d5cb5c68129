"""Every file a run writes is its own: no output may overwrite another output, or a file the run reads
(the --expect baseline, a --matrix file, the team's pgbouncer.ini, a results file being merged)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from leakcheck.model.errors import UsageError

#: How the baseline is named among a run's inputs.
EXPECT = "the --expect baseline"


def _same(path: str | Path) -> str:
    return os.path.realpath(os.path.expanduser(path))


def check_own_files(outputs: Mapping[str, str | Path | None], inputs: Mapping[str, str | Path | None],
                    may_rewrite: tuple[str, str] | None = None) -> None:
    """UsageError when an output (by option) is another output, or an input (by what it is, e.g.
    "the --expect baseline"). `may_rewrite`: an (output option, input) pair meant to be one file
    (--record with --update)."""
    seen = {_same(path): what for what, path in inputs.items() if path is not None}
    for option, path in outputs.items():
        if path is None:
            continue
        key = _same(path)
        other = seen.get(key)
        if other is not None and (option, other) != may_rewrite:
            raise UsageError(f"{option}={path} is {other}: the run would overwrite it; "
                             f"give {option} a path of its own")
        seen[key] = f"the file {option} writes"
