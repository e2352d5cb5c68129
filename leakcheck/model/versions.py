"""Version numbers and the `--pg` / `--bouncer` value syntax (pure, no I/O but this leakcheck's own release)."""

from __future__ import annotations

import functools
import importlib.metadata
import re
from dataclasses import dataclass
from pathlib import Path

from leakcheck.model.errors import UsageError

# ASCII digits only: \d would accept '１６' or '٤' (and int() would read them), and $ a trailing newline.
_VERSION = re.compile(r"[0-9]+(?:\.[0-9]+){0,3}")
_IN_TEXT = re.compile(r"([0-9]+\.[0-9]+(?:\.[0-9]+)?)")


@dataclass(frozen=True, order=True)
class Version:
    """A dotted version such as 16, 16.14 or 1.26.1; comparable and prefix-matchable."""

    parts: tuple[int, ...]

    @classmethod
    def parse(cls, text: str) -> Version:
        text = text.strip()
        if not _VERSION.fullmatch(text):
            raise UsageError(f"{text!r} is not a version number (expected digits and dots, e.g. 16 or 1.26.1)")
        return cls(tuple(int(p) for p in text.split(".")))

    def matches(self, exact: Version) -> bool:
        """True when `exact` is this version or a release of it (1.26 matches 1.26.1)."""
        return exact.parts[: len(self.parts)] == self.parts

    def prefix(self, n: int) -> Version:
        return Version(self.parts[:n])

    def __str__(self) -> str:
        return ".".join(map(str, self.parts))


@dataclass(frozen=True)
class Spec:
    """One item of `--pg` or `--bouncer`: a version to find, or a path to use as given."""

    raw: str
    version: Version | None = None
    path: Path | None = None

    def __str__(self) -> str:
        return self.raw


def parse_spec(raw: str, option: str) -> Spec:
    text = raw.strip()
    if not text or "\x00" in text:
        raise UsageError.bad_value(option, raw, "a version such as 16 or 1.26.1, or a path")
    if "/" in text or text.startswith("~"):
        try:
            return Spec(raw=text, path=Path(text).expanduser())
        except RuntimeError:
            raise UsageError.bad_value(option, raw, "a path whose ~user part names a known user") from None
    if not _VERSION.fullmatch(text):
        raise UsageError.bad_value(
            option, raw, "a version such as 16, 16.14, 1.26 or 1.26.1 (ASCII digits and dots), or a path to a binary"
        )
    return Spec(raw=text, version=Version.parse(text))


def parse_spec_list(raw: str, option: str) -> tuple[Spec, ...]:
    """Parse a comma separated option value; duplicates are dropped, order kept."""
    items = [p for p in raw.split(",")]
    if not raw.strip() or any(not p.strip() for p in items):
        raise UsageError.bad_value(option, raw, "a comma separated list such as 16,18 (no empty items)")
    specs: list[Spec] = []
    for item in items:
        spec = parse_spec(item, option)
        if spec.raw not in [s.raw for s in specs]:
            specs.append(spec)
    return tuple(specs)


def version_in_output(text: str) -> Version | None:
    """The first dotted version in a `--version` output such as 'PgBouncer 1.24.1'."""
    for line in text.splitlines():
        found = _IN_TEXT.search(line)
        if found:
            return Version.parse(found.group(1))
    return None


@functools.cache
def leakcheck_release() -> str:
    """This leakcheck's release as installed (its package metadata, e.g. 0.1.0); "unknown" when it is not."""
    try:
        return importlib.metadata.version("leakcheck")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
