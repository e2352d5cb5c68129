"""The pooler programs leakcheck runs: how each names itself and where Debian's package puts it (pure)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from leakcheck.provision.sources import banners


@dataclass(frozen=True)
class Program:
    """One pooler program: what its binary is called, how it answers `--version`, where it lives."""

    name: str  # the executable (and its folder in the cache): pgbouncer, odyssey, pgpool
    title: str  # for messages: PgBouncer, Odyssey, pgpool-II
    banner: re.Pattern[str]  # the first line of its `--version`
    example_banner: str  # what that line looks like, for messages
    example_spec: str  # a version to ask for, for messages
    installed: tuple[str, ...]  # where its Debian package puts it, relative to /
    package: str  # its Debian binary package

    @property
    def store(self) -> str:
        """Its folder in the cache: cache/<store>/<exact version>."""
        return self.name

    @property
    def example_path(self) -> str:
        return "/" + self.installed[0]

    @property
    def a_binary(self) -> str:
        """'a pgbouncer binary', 'an odyssey binary', for messages."""
        return f"{'an' if self.name[0] in 'aeiou' else 'a'} {self.name} binary"


PGBOUNCER = Program(
    "pgbouncer", "PgBouncer", banners.PGBOUNCER, "PgBouncer 1.24.1", "1.24", ("usr/sbin/pgbouncer",), "pgbouncer"
)
ODYSSEY = Program(
    "odyssey", "Odyssey", banners.ODYSSEY, "odyssey 1.5.2 release", "1.5", ("usr/bin/odyssey",), "odyssey"
)
PGPOOL = Program(
    "pgpool", "pgpool-II", banners.PGPOOL, "pgpool-II version 4.3.5", "4.3", ("usr/sbin/pgpool",), "pgpool2"
)
