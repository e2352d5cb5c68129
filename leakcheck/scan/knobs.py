"""`leakcheck scan --repo=DIR`: the pooler-relevant knobs a repository sets, as `--driver-set` axes.

What is read, each by the parser its format has where one exists (YAML, Python's own ast, URL query
strings; Java properties, JavaScript, PHP and Go by their lines):

- Rails `database.yml` (ERB tags left out): `prepared_statements`, `advisory_locks`; a DATABASE_URL's
  `prepared_statements=` / `advisory_locks=` query parameters too.
- Django settings (Python): `DISABLE_SERVER_SIDE_CURSORS`, `CONN_MAX_AGE` in a dict literal.
- Python drivers: a call's or dict's `prepare_threshold` (psycopg), `statement_cache_size` (asyncpg).
- URLs anywhere (`.env`, YAML, properties, code): `pgbouncer=true` (Prisma), a JDBC URL's
  `prepareThreshold`, a pgx v5 URL's `default_query_exec_mode`, a pgx v4 URL's `statement_cache_mode`.
- Spring / Hikari: a `prepareThreshold` property (`.properties`, or YAML at any depth).
- postgres.js: `prepare: false` in a file that imports `postgres`; PDO: `ATTR_EMULATE_PREPARES`;
  pgx: `QueryExecMode...` constants.

Each knob becomes a (driver, setting, value) axis named as issue 28 names the drivers (`activerecord`,
`django`, `prisma`, `hibernate`, `pgx-v5`, ...; `SETTINGS` below, data, so names can be adjusted),
proposed beside the driver's default so the matrix says whether the workaround is still needed; an axis
of a driver this leakcheck does not ship yet (or of a setting it does not take) is proposed but not run.

Bounded: folders such as .git and node_modules are skipped, symbolic links are not followed (a file is
read only where it lies inside the repository), and files larger than MAX_FILE are left out.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import yaml

from leakcheck.drivers.agents.catalogue import known_drivers
from leakcheck.drivers.settings import known_settings

#: (driver, setting) -> the driver's default value, as the proposal writes it beside the repository's.
SETTINGS: dict[tuple[str, str], str] = {
    ("activerecord", "prepared_statements"): "true",
    ("activerecord", "advisory_locks"): "true",
    ("django", "DISABLE_SERVER_SIDE_CURSORS"): "false",
    ("django", "CONN_MAX_AGE"): "0",
    ("prisma", "pgbouncer"): "false",
    ("hibernate", "prepareThreshold"): "5",
    ("pgjdbc", "prepareThreshold"): "5",
    ("psycopg", "prepare_threshold"): "5",
    ("asyncpg", "statement_cache_size"): "100",
    ("pgx", "statement_cache_mode"): "prepare",
    ("pgx", "prefer_simple_protocol"): "false",
    ("pgx-v5", "default_query_exec_mode"): "cache_statement",
    ("postgres-js", "prepare"): "true",
    ("pdo", "ATTR_EMULATE_PREPARES"): "false",
}
#: pgx v5's QueryExecMode constants as its URL parameter names them.
PGX_MODES = {"QueryExecModeCacheStatement": "cache_statement", "QueryExecModeCacheDescribe": "cache_describe",
             "QueryExecModeDescribeExec": "describe_exec", "QueryExecModeExec": "exec",
             "QueryExecModeSimpleProtocol": "simple_protocol"}

#: Python settings by name: their driver, and the constant types they take.
PYTHON_SETTINGS: dict[str, tuple[str, tuple[type, ...]]] = {
    "DISABLE_SERVER_SIDE_CURSORS": ("django", (bool,)),
    "CONN_MAX_AGE": ("django", (int, type(None))),
    "prepare_threshold": ("psycopg", (int, type(None))),
    "statement_cache_size": ("asyncpg", (int,)),
}

MAX_FILE = 1 << 20
SKIPPED = frozenset({".git", ".hg", ".svn", "node_modules", "vendor", ".venv", "venv", "__pycache__", ".tox",
                     "target", "build", "dist", ".gradle", ".idea", "tmp", "log", "coverage", ".bundle"})
#: Files whose text is searched for URLs and settings (by suffix, or by name).
TEXT_SUFFIXES = frozenset({".env", ".yml", ".yaml", ".properties", ".json", ".toml", ".ts", ".js", ".mjs", ".cjs",
                           ".go", ".java", ".kt", ".py", ".rb", ".php", ".xml", ".ini", ".conf", ".cfg", ".prisma",
                           ".sh", ".tf"})
TEXT_NAMES = frozenset({"Dockerfile", "Procfile", ".env", "docker-compose.yml", "docker-compose.yaml"})

_URL = re.compile(r"(?:jdbc:)?postgres(?:ql)?://[^\s'\"`<>\\]+")
_ERB = re.compile(r"<%.*?%>", re.S)
_ERB_LINE = re.compile(r"^[ \t]*<%[^=].*?%>[ \t]*$", re.M)  # a control line (`<% if ... %>`): left out
_JS_IMPORTS_POSTGRES = re.compile(r"""(?:from\s+|require\(\s*)['"]postgres['"]""")
_JS_PREPARE = re.compile(r"\bprepare\s*:\s*(true|false)\b")
_PDO = re.compile(r"ATTR_EMULATE_PREPARES\s*(?:=>|,)\s*(true|false|1|0)\b", re.I)
_PGX_MODE = re.compile(r"\bpgx\.(QueryExecMode[A-Za-z]+)\b")
_PGX_SIMPLE = re.compile(r"\bPreferSimpleProtocol\s*[:=]\s*(true|false)\b")
_PROPERTY = re.compile(r"^\s*([A-Za-z0-9_.\-\[\]]*prepareThreshold)\s*[=:]\s*([^\s#]+)", re.M)


@dataclass(frozen=True, order=True)
class Knob:
    """One setting the repository makes: where, the driver and setting it is, and its value as a matrix axis
    value ("?" when the code computes it)."""

    where: str
    driver: str
    setting: str
    value: str
    said: str  #: the text that set it, as written


@dataclass(frozen=True)
class Axis:
    """A proposed --driver-set axis: the repository's values, then the driver's default."""

    driver: str
    setting: str
    values: tuple[str, ...]

    @property
    def option(self) -> str:
        return f"{self.driver}:{self.setting}={','.join(self.values)}"

    @property
    def runnable(self) -> bool:
        """This leakcheck ships the driver and the driver takes the setting."""
        return self.driver in known_drivers() and self.setting in dict(known_settings(self.driver))


def files(root: Path) -> Iterator[Path]:
    """The repository's text files worth reading (bounded; no link followed; SKIPPED folders left out)."""
    for folder, dirs, names in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED and not os.path.islink(os.path.join(folder, d)))
        for name in sorted(names):
            path = Path(folder) / name
            if name not in TEXT_NAMES and path.suffix not in TEXT_SUFFIXES and not name.startswith(".env"):
                continue
            try:
                if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_FILE:
                    continue
            except OSError:
                continue
            yield path


def _line(text: str, needle: str) -> int:
    at = text.find(needle)
    return text.count("\n", 0, at) + 1 if at >= 0 else 1


def _bool(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value).strip().lower()
    return {"1": "true", "0": "false", "yes": "true", "no": "false", "on": "true", "off": "false"}.get(text, text)


def _walk_mapping(data: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every (key path, value) of nested YAML mappings and lists."""
    if isinstance(data, dict):
        for key, value in data.items():
            here = (*path, str(key))
            yield here, value
            yield from _walk_mapping(value, here)
    elif isinstance(data, list):
        for item in data:
            yield from _walk_mapping(item, path)


def _yaml(path: Path, text: str, rel: str) -> Iterator[Knob]:
    try:
        data = yaml.safe_load(_ERB.sub("erb", _ERB_LINE.sub("", text)))
    except yaml.YAMLError:
        return
    rails = path.name == "database.yml"
    for keys, value in _walk_mapping(data):
        key = keys[-1]
        if isinstance(value, (dict, list)):
            continue
        where = f"{rel}:{_line(text, key)}"
        said = f"{'.'.join(keys)}: {value}"
        if rails and key in ("prepared_statements", "advisory_locks"):
            yield Knob(where, "activerecord", key, _bool(value), said)
        elif key == "prepareThreshold" or key.endswith(".prepareThreshold"):
            yield from _jdbc(where, str(value), said)


def _jdbc(where: str, value: str, said: str) -> Iterator[Knob]:
    """A prepareThreshold: pgjdbc's, and the Spring Boot + Hibernate + HikariCP stack's that passes it on."""
    yield Knob(where, "pgjdbc", "prepareThreshold", value, said)
    yield Knob(where, "hibernate", "prepareThreshold", value, said)


def _url_knobs(url: str, where: str) -> Iterator[Knob]:
    try:
        query = dict(parse_qsl(urlsplit(url.removeprefix("jdbc:")).query, keep_blank_values=True))
    except ValueError:  # not a URL after all (`postgresql://[` in a test's text): nothing it sets
        return
    for name, value in query.items():
        if name == "pgbouncer":
            yield Knob(where, "prisma", "pgbouncer", _bool(value), url)
        elif name == "prepareThreshold":
            yield from _jdbc(where, value, url)
        elif name in ("prepared_statements", "advisory_locks"):
            yield Knob(where, "activerecord", name, _bool(value), url)
        elif name == "default_query_exec_mode":
            yield Knob(where, "pgx-v5", name, value, url)
        elif name == "statement_cache_mode":
            yield Knob(where, "pgx", name, value, url)


def _python(text: str, rel: str) -> Iterator[Knob]:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return
    for node in ast.walk(tree):
        pairs: list[tuple[str, ast.expr, int]] = []
        if isinstance(node, ast.Dict):
            pairs = [(k.value, v, k.lineno) for k, v in zip(node.keys, node.values, strict=True)
                     if isinstance(k, ast.Constant) and isinstance(k.value, str)]
        elif isinstance(node, ast.Call):
            pairs = [(k.arg, k.value, k.value.lineno) for k in node.keywords if k.arg]
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Attribute):
            pairs = [(node.targets[0].attr, node.value, node.lineno)]
        for name, value, line in pairs:
            known = PYTHON_SETTINGS.get(name)
            if known is None:
                continue
            driver, kinds = known
            if isinstance(value, ast.Constant):
                if not isinstance(value.value, kinds) or (bool not in kinds and isinstance(value.value, bool)):
                    continue  # a text or a number where the setting takes none: not that setting
                constant = value.value
                shown = "None" if constant is None else _bool(constant) if isinstance(constant, bool) else str(constant)
            else:
                shown = "?"  # computed (from the environment, ...): the axis takes the values found elsewhere
            yield Knob(f"{rel}:{line}", driver, name, shown, f"{name}={ast.unparse(value)}")


def _lines(pattern: re.Pattern[str], text: str) -> Iterator[tuple[re.Match[str], int]]:
    for found in pattern.finditer(text):
        yield found, text.count("\n", 0, found.start()) + 1


def _code(path: Path, text: str, rel: str) -> Iterator[Knob]:
    suffix = path.suffix
    if suffix in (".js", ".ts", ".mjs", ".cjs") and _JS_IMPORTS_POSTGRES.search(text):
        for found, line in _lines(_JS_PREPARE, text):
            yield Knob(f"{rel}:{line}", "postgres-js", "prepare", found.group(1), found.group(0))
    if suffix == ".php":
        for found, line in _lines(_PDO, text):
            yield Knob(f"{rel}:{line}", "pdo", "ATTR_EMULATE_PREPARES", _bool(found.group(1)), found.group(0))
    if suffix == ".go":
        for found, line in _lines(_PGX_MODE, text):
            if found.group(1) in PGX_MODES:
                yield Knob(f"{rel}:{line}", "pgx-v5", "default_query_exec_mode", PGX_MODES[found.group(1)],
                           found.group(0))
        for found, line in _lines(_PGX_SIMPLE, text):
            yield Knob(f"{rel}:{line}", "pgx", "prefer_simple_protocol", found.group(1), found.group(0))
    if suffix == ".properties":
        for found, line in _lines(_PROPERTY, text):
            yield from _jdbc(f"{rel}:{line}", found.group(2), found.group(0).strip())


_READERS: tuple[tuple[Callable[[Path], bool], Callable[[Path, str, str], Iterator[Knob]]], ...] = (
    (lambda p: p.suffix in (".yml", ".yaml"), _yaml),
    (lambda p: p.suffix == ".py", lambda p, text, rel: _python(text, rel)),
    (lambda p: True, _code),
)


def scan_repo(root: Path) -> list[Knob]:
    """Every knob the repository sets, in file order, each once per line."""
    found: list[Knob] = []
    for path in files(root):
        try:
            text = path.read_bytes().decode("utf-8", errors="replace")
        except OSError:
            continue
        rel = str(path.relative_to(root))
        for applies, reader in _READERS:
            if applies(path):
                found += reader(path, text, rel)
        for url, line in _lines(_URL, text):
            found += _url_knobs(url.group(0), f"{rel}:{line}")
    unique: dict[tuple[str, str, str, str], Knob] = {}
    for knob in found:  # a YAML anchor merged into several sections is one knob of its line
        unique.setdefault((knob.where, knob.driver, knob.setting, knob.value), knob)
    return list(unique.values())


def axes(knobs: list[Knob]) -> list[Axis]:
    """One axis per (driver, setting): the repository's values in the order found, then the driver's default."""
    values: dict[tuple[str, str], list[str]] = {}
    for knob in knobs:
        values.setdefault((knob.driver, knob.setting), [])
        if knob.value != "?" and knob.value not in values[(knob.driver, knob.setting)]:
            values[(knob.driver, knob.setting)].append(knob.value)
    out = []
    for (driver, setting), seen in values.items():
        default = SETTINGS.get((driver, setting))
        listed = [*seen, *([default] if default is not None and default not in seen else [])]
        out.append(Axis(driver, setting, tuple(listed)))
    return out


def run_options(chosen: list[Axis]) -> dict[str, str]:
    """The matrix options (ini keys) of the runnable axes: their drivers and their --driver-set axes."""
    drivers = list(dict.fromkeys(a.driver for a in chosen))
    return {"leakcheck_drivers": ",".join(drivers),
            "leakcheck_driver_set": "\n".join(a.option for a in chosen)}


def proposal(knobs: list[Knob], cells: str = "--pg=16,17,18 --bouncer=1.18,1.24,1.26") -> list[str]:
    """What --repo prints: the knobs, then the matrix of their settings as a command (and what cannot run yet)."""
    if not knobs:
        return ["no pooler-relevant knob found: the drivers' defaults are what the default matrix measures"]
    lines = [f"{len(knobs)} pooler-relevant knob{'s' if len(knobs) != 1 else ''}:"]
    lines += [f"  {k.where}: {k.driver} {k.setting}={k.value}  ({k.said[:100]})" for k in knobs]
    found = axes(knobs)
    every = " ".join(f"--driver-set {shlex.quote(a.option)}" for a in found)
    drivers = ",".join(dict.fromkeys(a.driver for a in found))
    lines += ["", "the matrix of their settings (each beside the driver's default):",
              f"  leakcheck run {cells} --drivers={drivers} {every}"]
    runnable = [a for a in found if a.runnable]
    later = [a for a in found if not a.runnable]
    if later:
        lines += ["", "not runnable with this leakcheck (a driver it does not ship yet, or a setting it does not "
                  "take): " + ", ".join(a.option for a in later)]
        if runnable:
            options = " ".join(f"--driver-set {shlex.quote(a.option)}" for a in runnable)
            lines.append(f"runnable now: leakcheck run {cells} --drivers="
                         f"{','.join(dict.fromkeys(a.driver for a in runnable))} {options}")
    lines += ["", "or: leakcheck scan --repo=DIR --run --pg=... --bouncer=... (runs the runnable part)"]
    return lines
