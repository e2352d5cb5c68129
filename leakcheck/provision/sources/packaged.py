"""Finding a packaged pooler (Odyssey, pgpool-II): a given path, the cache, an installed one, then Debian's
binary packages.

A Debian package is fetched with leakcheck's private apt set-up (debian.py) together with the
library packages it needs, extracted into cache/<program>/<exact version>/root and run through that
tree's own loader (program_folder.py: unpack_debs, loader_argv), so a sid build runs on bookworm. The
exact version is always the one the binary itself reports. Reachable here (Debian's archive):
Odyssey 1.5.2 (sid), pgpool-II 4.3.5 (bookworm), 4.6.1 (trixie), 4.7.3 (sid).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from leakcheck.model.versions import Spec, Version
from leakcheck.provision.base import Binary
from leakcheck.provision.sources.debian_programs import from_debian
from leakcheck.provision.sources.program_cache import resolve_in_store
from leakcheck.provision.sources.programs import Program


@dataclass(frozen=True)
class Packaged:
    """A resolver of one packaged program: `Packaged(ODYSSEY, "--odyssey")(spec, cache)` is an odyssey of the
    version `spec` asks for (1.5 -> 1.5.2), or at its path; `option` names it in messages."""

    program: Program
    option: str

    def __call__(self, spec: Spec, cache: Path, option: str | None = None) -> Binary:
        return resolve_packaged(self.program, spec, cache, option or self.option)


def resolve_packaged(program: Program, spec: Spec, cache: Path, option: str) -> Binary:
    """`program` at spec's path, else of spec's version from the cache, the machine or Debian;
    ProvisionError listing every attempt. Every binary is checked by running it (`--version`)."""
    hint = (
        f"{program.title} comes from Debian's {program.package} package here; "
        f"or give the path of {program.a_binary} (e.g. {program.example_path})"
    )

    def debian(wanted: Version, store: Path, attempts: list[str]) -> Binary | None:
        return from_debian(program, wanted, store, attempts)

    return resolve_in_store(program, spec, cache, option, [debian], hint)
