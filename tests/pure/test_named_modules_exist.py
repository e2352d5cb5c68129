"""Every module a comment, a docstring or a docs page names exists: `leakcheck/run/watch.py`, `run/watch.py`
(from the package, or from the naming file's folder up), `watch.py` (somewhere in the repository), and
`leakcheck.run.watch` (with what it names in that module: `leakcheck.run.watch.watched`)."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from tests.pure.bound_names import bound_names

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "leakcheck"
#: Where a relative path may start, besides the naming file's folder and its parents: the repository, the
#: package, and the agents' folders (docs name an agent's files by its id: `django/agent.py`).
BASES = (ROOT, PACKAGE, PACKAGE / "drivers" / "agents")
#: What is read: the package's comments and docstrings (its whole text) and the docs (tests name data files).
NAMING = [*sorted(PACKAGE.rglob("*.py")), *sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]

PATH = re.compile(r"(?<![\w./-])((?:[A-Za-z_][\w-]*/)*[A-Za-z_]\w*\.py)\b")
DOTTED = re.compile(r"(?<![\w./-])leakcheck((?:\.[A-Za-z_]\w*)+)")


@cache
def _file_names() -> frozenset[str]:
    return frozenset(p.name for folder in ("leakcheck", "tests", "scripts") for p in (ROOT / folder).rglob("*.py")) | {
        p.name for p in ROOT.glob("*.py")}


def _path_exists(path: str, named_in: Path) -> bool:
    if "/" not in path:
        return path in _file_names()
    folders = [*BASES, *(d for d in named_in.parents if d == ROOT or ROOT in d.parents)]
    return any((folder / path).is_file() for folder in folders)


def _module_file(parts: list[str]) -> Path | None:
    base = ROOT.joinpath(*parts)
    return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)


def _dotted_exists(dotted: str) -> bool:
    """`leakcheck.<room>...`: its longest module prefix exists and binds the next name. A name whose first
    part is no module of the package is not a module path (`leakcheck.md`, the `leakcheck.tenant` setting)."""
    parts = ["leakcheck", *dotted.split(".")[1:]]
    if _module_file(parts[:2]) is None:
        return True
    k = max(k for k in range(2, len(parts) + 1) if _module_file(parts[:k]) is not None)
    module = _module_file(parts[:k])
    assert module is not None
    return k == len(parts) or parts[k] in bound_names(module, imports=True)


def test_every_module_a_comment_a_docstring_or_a_docs_page_names_exists() -> None:
    stale = []
    for source in NAMING:
        text = source.read_text(encoding="utf-8")
        where = source.relative_to(ROOT)
        stale += [f"{where}: {m.group(1)}" for m in PATH.finditer(text) if not _path_exists(m.group(1), source)]
        stale += [f"{where}: leakcheck{m.group(1)}" for m in DOTTED.finditer(text)
                  if not _dotted_exists("leakcheck" + m.group(1))]
    assert stale == []
