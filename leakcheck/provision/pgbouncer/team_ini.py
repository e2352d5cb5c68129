"""A team's own pgbouncer.ini (`--bouncer-ini`), read as PgBouncer reads it so leakcheck can run it
against its test server.

The syntax is ini_syntax.py's (PgBouncer's own parser, ported). What it means is PgBouncer's too:
every `[pgbouncer]` header resets each setting that has a default (so only what follows the last
one counts, plus the few keys without a default), entries of `[databases]`, `[users]` and
`[peers]` add up however often their header appears, and another section, or a setting before any
header, stops PgBouncer loading (refused here, in one line). Keys keep their case: PgBouncer's are
lower case and it refuses any other spelling itself. Files are read only when they are regular
files the server user could read itself, 1 MiB in all (`_Files`). What leakcheck overrides is
listed by `overrides()` (for the run header and reports).
"""

from __future__ import annotations

import functools
import os
import re
import stat
from dataclasses import dataclass

from leakcheck.model.errors import UsageError
from leakcheck.provision.host.system import opened_by, server_user
from leakcheck.provision.pgbouncer.ini_syntax import Assign, Header, parse
from leakcheck.provision.pgbouncer.settings import DROPPED_KEYS, HARNESS_KEYS, TEAM, USER_HARNESS_KEYS

#: Sections leakcheck replaces or drops; every other section ([users], ...) is kept.
REPLACED_SECTIONS = {"databases": "one entry, the test database on leakcheck's server",
                     "peers": "no peers: cancel requests stay in this PgBouncer"}
#: The sections PgBouncer knows (src/main.c config_sects; names compared exactly).
SECTIONS = ("pgbouncer", "databases", "users", "peers")
#: [pgbouncer] keys without a default (src/main.c, 1.18-1.24): a later [pgbouncer] header keeps them.
NO_DEFAULT = frozenset({"auth_dbname", "auth_file", "auth_ident_file", "auth_user", "conffile", "service_name",
                        "user", "verbose"})
#: The ini and all its %include files together, read at most (a team's ini is a few kB).
MAX_BYTES = 1024 * 1024

#: A UTF-8 byte order mark, as Python decodes it.
BOM = "\ufeff"
#: (key, value), as PgBouncer receives them.
Item = tuple[str, str]


def line_of(item: Item) -> str:
    return f"{item[0]} = {item[1]}"


@dataclass(frozen=True)
class Section:
    name: str
    items: tuple[Item, ...]


@dataclass(frozen=True)
class TeamIni:
    path: str
    sections: tuple[Section, ...]  #: [pgbouncer] as PgBouncer ends up with it, then the others in order
    files: tuple[str, ...] = ()  #: every file read (absolute): the ini, then its includes as reached
    notes: tuple[str, ...] = ()  #: where PgBouncer reads the file otherwise than it looks (for the run header)

    def section(self, name: str) -> tuple[Item, ...]:
        return tuple(item for s in self.sections if s.name == name for item in s.items)

    def value(self, key: str) -> str | None:
        """The [pgbouncer] value of `key` (the last one written wins, as in PgBouncer)."""
        found = [v for k, v in self.section("pgbouncer") if k == key]
        return found[-1] if found else None

    def kept_sections(self) -> tuple[Section, ...]:
        return tuple(s for s in self.sections if s.name not in ("pgbouncer", *REPLACED_SECTIONS))


@functools.lru_cache(maxsize=16)
def load(path: str) -> TeamIni:
    """The ini at `path` as PgBouncer would load it; a one-line UsageError when PgBouncer would not
    load it or leakcheck will not read a file it names."""
    files = _Files()
    events = parse(path, files, "--bouncer-ini")
    current: str | None = None
    main: list[Item] = []
    others: dict[str, list[Item]] = {}
    headers: dict[str, list[Header]] = {}
    notes: list[str] = []
    reset = 0  # [pgbouncer] settings a later [pgbouncer] header sent back to their defaults
    for event in events:
        if isinstance(event, Header):
            if event.name not in SECTIONS:
                raise UsageError(f"--bouncer-ini: [{event.name}] at {event.where} is no section PgBouncer knows "
                                 f"(it stops loading there; names are exact: {', '.join(SECTIONS)}); fix the header")
            current = event.name
            headers.setdefault(current, []).append(event)
            if event.rest:
                notes.append(_after_header(event))
            if current == "pgbouncer":
                reset += sum(1 for item in main if item[0] not in NO_DEFAULT)
                main = [item for item in main if item[0] in NO_DEFAULT]
            else:
                others.setdefault(current, [])
            continue
        assert isinstance(event, Assign)
        if current is None:
            raise UsageError(f"--bouncer-ini: {event.key} = ... at {event.where} comes before any [section] header "
                             "(PgBouncer refuses it); put it under [pgbouncer]")
        if current == "pgbouncer":
            _check_allowed(event)
        (main if current == "pgbouncer" else others[current]).append((event.key, event.value))
    notes += [_repeated(name, found, reset) for name, found in headers.items() if len(found) > 1]
    if "users" in others:
        others["users"] = _users_kept(others["users"], notes)
    sections = (Section("pgbouncer", tuple(main)), *(Section(n, tuple(items)) for n, items in others.items()))
    return TeamIni(path, sections, tuple(files.read), tuple(notes))


def _check_allowed(setting: Assign) -> None:
    """A [pgbouncer] key is one a team may set (a reset or check query with SQL that only resets or checks a
    session), or one leakcheck sets or drops itself; else one line."""
    key = setting.key
    if (said := TEAM.value_refusal(key, setting.value)) is not None:
        raise UsageError(f"--bouncer-ini: {key} at {setting.where}: {said}; change that line")
    if key in TEAM.allowed or key in HARNESS_KEYS or key in DROPPED_KEYS:
        return
    known = TEAM.allowed | set(HARNESS_KEYS) | set(DROPPED_KEYS)
    case = f" (keys are case-sensitive: PgBouncer knows {key.lower()})" if key.lower() in known else ""
    raise UsageError(f"--bouncer-ini: {key} at {setting.where}{case}: {TEAM.refusal(key)}; remove that line")


_USER_HARNESS = re.compile(r"(?:^|\s)(" + "|".join(USER_HARNESS_KEYS) + r")\s*=")


def _users_kept(entries: list[Item], notes: list[str]) -> list[Item]:
    """[users] entries, without those that set a pool size for their user (each dropped entry noted)."""
    kept = []
    for user, value in entries:
        found = _USER_HARNESS.search(value)
        if found is None:
            kept.append((user, value))
        else:
            notes.append(f"[users] {user}: dropped (it sets {found.group(1)}, which leakcheck controls: a pool of one)")
    return kept


def _after_header(header: Header) -> str:
    what = "a comment" if header.rest[0] in "#;" else "more ini on the same line"
    return (f"[{header.name}] at {header.where} is followed by {header.rest!r}: read as PgBouncer reads it, "
            f"a section header, then {what}")


def _repeated(name: str, found: list[Header], reset: int) -> str:
    places = ", ".join(h.where for h in found)
    if name != "pgbouncer":
        return f"[{name}] appears {len(found)} times ({places}): its entries add up in order, as in PgBouncer"
    return (f"[pgbouncer] appears {len(found)} times ({places}): PgBouncer resets every setting to its default at "
            f"each, so the {reset} settings written before {found[-1].where} are dropped, as PgBouncer drops them")


class _Files:
    """ini_syntax's reader: regular files only, opened without blocking, MAX_BYTES in all."""

    def __init__(self) -> None:
        self.read: list[str] = []
        self.total = 0

    def __call__(self, name: str, via: str) -> str:
        fix = "give the path of your pgbouncer.ini" if via == "--bouncer-ini" else "fix the %include line"
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        except FileNotFoundError:
            here = "" if os.path.isabs(name) else f" (relative to the current folder {os.getcwd()}, as in PgBouncer)"
            raise UsageError(f"{via}: {name!r} does not exist{here}; {fix}") from None
        except OSError as exc:
            raise UsageError(f"{via}: cannot open {name} ({exc.strerror or exc}); {fix}") from None
        try:
            found = os.fstat(fd)
            if not stat.S_ISREG(found.st_mode):
                raise UsageError(f"{via}: {name} is {_kind(found.st_mode)}, not a regular file (leakcheck reads only "
                                 f"regular files); {fix}")
            self._check_the_server_user_reads(name, found, via)
            data = _read_at_most(fd, MAX_BYTES - self.total)
        except OSError as exc:
            raise UsageError(f"{via}: cannot read {name} ({exc.strerror or exc}); {fix}") from None
        finally:
            os.close(fd)
        if data is None:
            raise UsageError(f"{via}: {name} makes the ini and its includes larger than {MAX_BYTES // 1024} KiB "
                             "(leakcheck's bound for a pgbouncer.ini); include smaller files")
        self.total += len(data)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise UsageError(f"{via}: {name} is not UTF-8 text; make it a readable UTF-8 file") from None
        if "\0" in text:
            raise UsageError(f"{via}: {name} holds a NUL byte (PgBouncer stops reading at it); remove it")
        if text.startswith(BOM):
            raise UsageError(f"{via}: {name} starts with a UTF-8 byte order mark (BOM), which PgBouncer refuses "
                             "(\"syntax error in configuration\" at its line 1, seen on 1.18, 1.24 and 1.26); save it "
                             "without the BOM")
        self.read.append(os.path.abspath(name))
        return text

    @staticmethod
    def _check_the_server_user_reads(name: str, found: os.stat_result, via: str) -> None:
        """The file leakcheck opened (`found`, its fstat) is the very file the server user gets when it
        opens `name` itself: checked on the open file, so nothing put in its place after the check is read."""
        user = server_user()
        if user.is_self:
            return  # leakcheck's own open was the server user's
        theirs = opened_by(user, name)
        if theirs is None:
            raise UsageError(
                f"{via}: the server user {user.name} (PgBouncer runs as it) cannot read {name}, and "
                "leakcheck copies what it reads into the ini PgBouncer reads: make the file readable for that "
                f"user (and its folders enterable), or use another file")
        if theirs != (found.st_dev, found.st_ino):
            raise UsageError(f"{via}: {name} was replaced while leakcheck read it (the server user {user.name} opened "
                             "another file there than leakcheck did), so it is not copied; run again once it stays put")


def _read_at_most(fd: int, limit: int) -> bytes | None:
    """Up to `limit` bytes of `fd`; None when there is more."""
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = os.read(fd, min(65536, limit + 1 - size))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
    return None


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def overrides(team: TeamIni, harness: dict[str, str], dropped: dict[str, str]) -> list[str]:
    """What leakcheck changes in the team's ini, one line each (for the run header and reports)."""
    out = list(team.notes)
    for key, why in harness.items():
        theirs = team.value(key)
        if key == "pool_mode":  # theirs is what the probes run in (a --bouncer-set pool_mode axis wins)
            out.append(f"pool_mode: {'transaction' if theirs is None else repr(theirs)} for the probes "
                       "(unless a --bouncer-set pool_mode axis is given), session for the session control")
            continue
        out.append(f"{key}: {'set by leakcheck' if theirs is None else f'{theirs!r} overridden'} ({why})")
    for key, why in dropped.items():
        if team.value(key) is not None:
            out.append(f"{key}: {team.value(key)!r} dropped ({why})")
    for name, why in REPLACED_SECTIONS.items():
        entries = team.section(name)
        if entries:
            out.append(f"[{name}]: its {len(entries)} entries replaced ({why})")
    return out
