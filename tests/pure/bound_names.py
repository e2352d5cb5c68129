"""What a module binds itself, read from its source (the import-path and named-module tests use it)."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path


@cache
def bound_names(module: Path, imports: bool = False) -> frozenset[str]:
    """The names `module` binds: its classes, functions and assignments, and with `imports` what it imports."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            found.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif imports and isinstance(node, (ast.Import, ast.ImportFrom)):
            found.update((a.asname or a.name).split(".")[0] for a in node.names)
    return frozenset(found)
