"""The `--out` folder: checked before any server starts, and one run's scripts swapped in file by
file (each whole or absent), that configuration's earlier files not in the new set removed after."""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path

from leakcheck.model.errors import UsageError


def parse_out(text: str) -> Path | None:
    """`none` prints only; empty is an error; else a folder that exists and takes files, or can be made."""
    if not text.strip():
        raise UsageError.empty("--out", "a folder, or none")
    if text == "none":
        return None
    path = Path(text).expanduser()
    problem = _unwritable(path)
    if problem:
        raise UsageError.bad_value("--out", text, f"a folder discovery can write its scripts to ({problem})")
    return path


def _unwritable(path: Path) -> str:
    """Why no scripts could be written to this folder ('' when they can)."""
    if path.exists():
        if not path.is_dir():
            return "it is not a folder"
        try:
            fd, trial = tempfile.mkstemp(dir=path, prefix=".leakcheck-", suffix=".tmp")
        except OSError as exc:
            return f"cannot write there: {exc.strerror or exc}"
        os.close(fd)
        os.unlink(trial)
        return ""
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        return f"{parent} is not a folder"
    try:  # tried for real: permission bits do not tell for root, read-only mounts or /proc
        os.rmdir(tempfile.mkdtemp(prefix=".leakcheck-", dir=parent))
    except OSError as exc:
        return f"{parent} takes no folder, so it cannot be made: {exc.strerror or exc}"
    return ""


def name(stem: str, number: int, slug: str) -> str:
    return f"{stem}-{number:02d}-{slug}.sql"


def ours(stem: str, file: str) -> bool:
    """A script of this configuration (`<stem>-NN-<slug>.sql`, any number of digits)."""
    return re.fullmatch(re.escape(stem) + r"-[0-9]{2,}-.+\.sql", file) is not None


def write(out: Path, stem: str, scripts: Sequence[tuple[str, str]]) -> tuple[list[Path], list[Path]]:
    """One file per finding, `<stem>-NN-<slug>.sql`, each written aside and renamed into place; then
    this configuration's earlier files not in the new set go. (files written, files removed)"""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for number, (slug, text) in enumerate(scripts, 1):
        path = out / name(stem, number, slug)
        _replace(path, text)
        written.append(path)
    keep = {p.name for p in written}
    removed = [old for old in sorted(out.iterdir()) if ours(stem, old.name) and old.name not in keep]
    for old in removed:
        old.unlink(missing_ok=True)
    return written, removed


def _replace(path: Path, text: str) -> None:
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
