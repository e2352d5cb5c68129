"""One import path per name: what a leakcheck module is imported for is defined in that module (no re-exports)."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [*sorted((ROOT / "leakcheck").rglob("*.py")), *sorted((ROOT / "tests").rglob("*.py")),
           ROOT / "conftest.py", *sorted((ROOT / "scripts").glob("*.py"))]


@cache
def _file_of(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


@cache
def _defined(path: Path) -> set[str]:
    """The names `path` binds itself: its classes, functions and assignments (not what it imports)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return names


def test_every_name_imported_from_a_leakcheck_module_is_defined_in_that_module() -> None:
    elsewhere = []
    for source in SOURCES:
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or node.level or not (node.module or "").startswith("leakcheck"):
                continue
            assert node.module is not None
            path = _file_of(node.module)
            if path is None:
                continue
            defined = _defined(path)
            for alias in node.names:
                submodule = _file_of(f"{node.module}.{alias.name}")
                if alias.name not in defined and submodule is None:
                    elsewhere.append(f"{source.relative_to(ROOT)}: {alias.name} from {node.module}")
    assert elsewhere == []
