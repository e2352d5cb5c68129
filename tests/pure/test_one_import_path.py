"""One import path per name: what a leakcheck module is imported for is defined in that module (no re-exports)."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

from tests.pure.bound_names import bound_names

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
            defined = bound_names(path)
            for alias in node.names:
                submodule = _file_of(f"{node.module}.{alias.name}")
                if alias.name not in defined and submodule is None:
                    elsewhere.append(f"{source.relative_to(ROOT)}: {alias.name} from {node.module}")
    assert elsewhere == []
