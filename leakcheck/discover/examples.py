"""Hypothesis' example database, one key space per configuration and round.

Hypothesis keys saved examples by the test function's source, which is the same for every
discovery run; `Keyed` puts another prefix in front (versions, route, driver, what earlier rounds
explained), so a run replays only examples saved by runs that searched the same thing.
"""

from __future__ import annotations

from collections.abc import Iterable

from hypothesis.database import ExampleDatabase


class Keyed(ExampleDatabase):
    """Another database's entries under a prefix."""

    def __init__(self, inner: ExampleDatabase, prefix: bytes) -> None:
        super().__init__()
        self.inner, self.prefix = inner, prefix

    def save(self, key: bytes, value: bytes) -> None:
        self.inner.save(self.prefix + key, value)

    def fetch(self, key: bytes) -> Iterable[bytes]:
        return self.inner.fetch(self.prefix + key)

    def delete(self, key: bytes, value: bytes) -> None:
        self.inner.delete(self.prefix + key, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self.inner.move(self.prefix + src, self.prefix + dest, value)
