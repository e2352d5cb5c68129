"""What an application sent, read from where PostgreSQL wrote it down: one streaming reader per kind.

An input's kind is found from its content (its first records), never from its name:

- `stderr`: PostgreSQL's stderr log (`log_destination = 'stderr'`), with any `log_line_prefix`. The
  session is the prefix's `%c` session id when it has one, else its `[%p]` process id (PostgreSQL's
  default prefix `%m [%p] `); a prefix with neither gives statements without a session.
- `csvlog`, `jsonlog`: the structured logs (`log_destination = 'csvlog'` / `'jsonlog'`, PostgreSQL 15+),
  their session id and process id read from their own fields.
- `pgss-csv`: a `pg_stat_statements` export as CSV with a header naming a `query` column (`queryid` and
  `calls` are read when present): `COPY (SELECT queryid, calls, query FROM pg_stat_statements) TO STDOUT
  WITH (FORMAT csv, HEADER)`.
- `pgss-json`: the same as JSON, one object per line with a `query` key (`COPY (SELECT row_to_json(s)
  FROM pg_stat_statements s) TO ...`, whose text format doubles backslashes, is read too), or one JSON
  array of them (`psql -Atc 'SELECT json_agg(s) FROM pg_stat_statements s'`).
- `sql`: a folder of `.sql` files (migrations), every file below it in name order, each statement with
  its file and line; or one SQL file.

A log gives the statements the server logged with `log_statement = 'all'` (`statement: ...`, and
`execute NAME: ...` for the extended protocol, whose NAME is the prepared statement's) or with
`log_min_duration_statement = 0` (`duration: ... ms  statement: ...`); a statement logged twice by
both settings is counted once (PostgreSQL then logs the duration alone). Messages in another language
than English (`lc_messages`) are not recognized.

Every reader yields `Sent` records one at a time, reading its file as a stream (a log line by line, a
JSON array object by object), so a file of any size is read in bounded memory; a gzip file is read
through gzip (found by its magic bytes). A structured file that breaks its own format (a JSON line that
is not JSON, a CSV row without the query column) is a one-line UsageError naming the file and line.
"""

from __future__ import annotations

import csv
import gzip
import io
import itertools
import json
import os
import re
import stat
import sys
import zlib
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import IO, Any, NamedTuple

from pglast.parser import ParseError, parse_sql, scan, split

from leakcheck.model.errors import UsageError


class Kind(StrEnum):
    """What an input is, found from its content."""

    STDERR = "stderr"  #: PostgreSQL's stderr log
    CSVLOG = "csvlog"  #: PostgreSQL's csvlog
    JSONLOG = "jsonlog"  #: PostgreSQL's jsonlog (15+)
    PGSS_CSV = "pgss-csv"  #: a pg_stat_statements export as CSV with a header
    PGSS_JSON = "pgss-json"  #: a pg_stat_statements export as JSON (lines, or one array)
    SQL = "sql"  #: SQL files: a folder of migrations, or one file

    @property
    def sessions(self) -> bool:
        """It tells which session sent each statement (so transactions can be followed)."""
        return self in (Kind.STDERR, Kind.CSVLOG, Kind.JSONLOG)


class Sent(NamedTuple):
    """One statement (or one simple-protocol message of several) the application sent (a named tuple: a
    log gives millions)."""

    text: str
    where: str  #: `file:line`, or `file: queryid N` for a pg_stat_statements row
    session: str | None = None  #: the session that sent it (a log's session id or pid); None: not known
    calls: int = 1  #: how many times (pg_stat_statements' calls; 1 for a log line)
    #: the protocol-level prepared statement it ran as (a log's `execute S_1: ...`); None: unnamed or not known
    prepared: str | None = None


class Ended(NamedTuple):
    """A session ended (a log's `disconnection:`) or a new one took its process id (`connection authorized:`)."""

    session: str


#: The longest statement text kept (longer ones are counted as not parsed): far above any application's.
MAX_STATEMENT = 1 << 20
#: How much of an input is read to find its kind.
HEAD = 64 * 1024
#: Folders never entered when a folder of SQL files is read.
SKIPPED_FOLDERS = frozenset({".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", ".tox"})
#: The largest single SQL file read (a migration; a pg_dump of a database is not one).
MAX_SQL_FILE = 64 * 1024 * 1024

# A log line's severity, after its prefix: `LOG:  ` (two spaces), as PostgreSQL writes it.
_SEVERITY = re.compile(r"(?:^|(?<=[\s\]:)>]))(DEBUG[1-5]?|INFO|NOTICE|WARNING|ERROR|LOG|FATAL|PANIC|DETAIL|HINT|"
                       r"QUERY|CONTEXT|LOCATION|STATEMENT):  ")
_PID = re.compile(r"\[([0-9]+)\]")
# %c: the session's start time and process id in hex (8 hex digits, a dot, up to 8 more)
_SESSION_ID = re.compile(r"(?<![0-9A-Za-z.])([0-9a-f]{8}\.[0-9a-f]{1,8})(?![0-9A-Za-z.])")
_TIMESTAMP = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}")
# csvlog's columns (PostgreSQL 13+): process_id, session_id, error_severity, message
_CSV_PID, _CSV_SESSION, _CSV_SEVERITY, _CSV_MESSAGE = 3, 5, 11, 13
_CSVLOG_MIN_FIELDS = 23
_GZIP = b"\x1f\x8b"
_KINDS_SAID = ("a PostgreSQL log (stderr, csvlog or jsonlog, written with log_statement=all or "
               "log_min_duration_statement=0), a pg_stat_statements export (CSV with a header naming a query "
               "column, or JSON) or SQL (a folder of .sql files)")


def _check_regular(path: Path, what: str) -> None:
    """A regular file or a folder; a FIFO, device or socket is never opened."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        raise UsageError(f"{what}: {path} does not exist; give {_KINDS_SAID}") from None
    except OSError as exc:
        raise UsageError(f"{what}: cannot read {path} ({exc.strerror or exc}); fix its permissions") from None
    if not (stat.S_ISREG(found.st_mode) or stat.S_ISDIR(found.st_mode)):
        raise UsageError(f"{what}: {path} is not a regular file or a folder; give {_KINDS_SAID}")


def open_text(path: Path) -> IO[str]:
    """The file as text (UTF-8, undecodable bytes replaced: a log holds what clients sent), through gzip
    when it is gzip; newlines untranslated (the csv module needs them so)."""
    with open(path, "rb") as probe:
        magic = probe.read(2)
    # each closed with the wrapper
    binary: IO[bytes] = gzip.GzipFile(path, "rb") if magic == _GZIP else open(path, "rb")  # type: ignore[assignment]  # noqa: SIM115
    return io.TextIOWrapper(binary, encoding="utf-8", errors="replace", newline="")


def _head(path: Path) -> str:
    try:
        with open_text(path) as stream:
            return stream.read(HEAD).lstrip("\ufeff")
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise UsageError(f"scan: cannot read {path} ({getattr(exc, 'strerror', None) or exc}); give "
                         f"{_KINDS_SAID}") from None


def detect(path: Path) -> Kind:
    """The kind of input `path` is, from its content; a one-line UsageError when it is none of them."""
    _check_regular(path, "scan")
    if path.is_dir():
        return Kind.SQL
    head = _head(path)
    lines = [line for line in head.splitlines() if line.strip()]
    if not lines:
        raise UsageError(f"scan: {path} is empty: a scan of nothing proves nothing; give {_KINDS_SAID}")
    first = lines[0].lstrip()
    if first.startswith("{"):
        return _json_kind(path, first)
    if _SEVERITY.search(first):  # before a JSON array: a log_line_prefix may begin with "[%p]"
        return Kind.STDERR
    if first.startswith("["):
        return Kind.PGSS_JSON
    record = next(csv.reader(io.StringIO(head)), [])
    if record and _TIMESTAMP.match(record[0]) and len(record) >= _CSVLOG_MIN_FIELDS:
        return Kind.CSVLOG
    if "query" in (field.strip().lower() for field in record):
        return Kind.PGSS_CSV
    if any(_SEVERITY.search(line) for line in lines[:50]):
        return Kind.STDERR
    if path.suffix.lower() == ".sql" or _parses(head):
        return Kind.SQL
    said = first[:80] + ("..." if len(first) > 80 else "")
    raise UsageError(f"scan: {path} is not {_KINDS_SAID}: its first line is {said!r}")


def _parses(text: str) -> bool:
    try:
        return bool(parse_sql(text))
    except ParseError:
        return False


def _json_kind(path: Path, first: str) -> Kind:
    data = _json_line(first)
    if isinstance(data, dict):
        if "query" in data:
            return Kind.PGSS_JSON
        if "message" in data and ("error_severity" in data or "pid" in data):
            return Kind.JSONLOG
    raise UsageError(f"scan: {path}:1 is JSON but neither a jsonlog entry (with message and error_severity) nor a "
                     "pg_stat_statements row (with query); give one of those")


# --- COPY's text format --------------------------------------------------------------------------

_COPY_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\"}


def copy_unescape(text: str) -> str:
    """A field of COPY's text format as its value: `\\\\` -> `\\`, `\\n` -> newline, octal and `\\x` escapes."""
    if "\\" not in text:
        return text
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch != "\\" or i + 1 == n:
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt in _COPY_ESCAPES:
            out.append(_COPY_ESCAPES[nxt])
            i += 2
        elif nxt in "01234567":
            j = i + 1
            while j < min(n, i + 4) and text[j] in "01234567":
                j += 1
            out.append(chr(int(text[i + 1:j], 8)))
            i = j
        elif nxt == "x" and i + 2 < n and text[i + 2] in "0123456789abcdefABCDEF":
            j = i + 2
            while j < min(n, i + 4) and text[j] in "0123456789abcdefABCDEF":
                j += 1
            out.append(chr(int(text[i + 2:j], 16)))
            i = j
        else:
            out.append(nxt)
            i += 2
    return "".join(out)


def _json_line(line: str) -> Any:
    """A JSON value on one line: as it is, else as COPY's text format wrote it (backslashes doubled);
    None when it is neither."""
    try:
        return json.loads(line)
    except ValueError:
        pass
    try:
        return json.loads(copy_unescape(line))
    except ValueError:
        return None


_BACKSLASHES = re.compile(r"\\+")


class _JsonLines:
    """JSON lines of one file, as written or as COPY's text format wrote them. COPY doubles every backslash,
    so its lines never hold an odd run of them; JSON's own escapes (`\\n`, `\\"`) are one. The first line
    with backslashes decides (an odd run: as written; only even runs: COPY's), and a line that does not
    parse one way is tried the other."""

    def __init__(self) -> None:
        self.copied: bool | None = None

    def __call__(self, line: str) -> Any:
        if self.copied is None and "\\" in line:
            self.copied = all(len(run) % 2 == 0 for run in _BACKSLASHES.findall(line))
        for copied in ((True, False) if self.copied else (False, True)):
            try:
                return json.loads(copy_unescape(line) if copied else line)
            except ValueError:
                continue
        return None


# --- readers -------------------------------------------------------------------------------------


def read(path: Path, kind: Kind) -> Iterator[Sent | Ended]:
    """Every statement `path` holds, in order (and, from a log, where sessions ended); a file that cannot be
    read to its end (a truncated gzip file, a disk error) is a one-line UsageError."""
    try:
        yield from _read(path, kind)
    except (OSError, EOFError, zlib.error) as exc:
        said = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise UsageError(f"scan: reading {path} failed ({said}); give the whole file") from None


def _read(path: Path, kind: Kind) -> Iterator[Sent | Ended]:
    if kind is Kind.SQL:
        yield from _sql(path)
        return
    with open_text(path) as stream:
        if kind is Kind.STDERR:
            yield from _stderr(stream, str(path))
        elif kind is Kind.CSVLOG:
            yield from _csvlog(stream, str(path))
        elif kind is Kind.JSONLOG:
            yield from _jsonlog(stream, str(path))
        elif kind is Kind.PGSS_CSV:
            yield from _pgss_csv(stream, str(path))
        else:
            yield from _pgss_json(stream, str(path))


def message_statement(message: str) -> tuple[str, str | None] | None:
    """The statement a log message records, and the prepared statement it ran as (None: unnamed); None
    when the message records none (a duration alone, a parse or bind step, a fetch from a portal, ...)."""
    head, sep, text = message.partition(": ")
    if head == "duration":
        _, sep, message = text.partition(" ms  ")
        if not sep:
            return None
        head, sep, text = message.partition(": ")
    if head == "statement":
        return text, None
    if sep and head.startswith("execute ") and not head.startswith("execute fetch from "):
        name = head[8:].split("/", 1)[0]
        return text, (None if name == "<unnamed>" else name)
    return None


_ENDS = ("disconnection: ", "connection authorized: ")


def _log_at(line: str) -> int:
    """Where a line's `LOG:  ` severity starts (the first `:  ` of the line ends it), else -1."""
    end = line.find(":  ")
    if end < 3 or line[end - 3:end] != "LOG" or (end > 3 and line[end - 4] not in " \t]:>)"):
        return -1
    return end - 3


def _logged(message: str, session: str | None, where: str) -> Sent | Ended | None:
    if session is not None and message.startswith(_ENDS):
        return Ended(session)
    said = message_statement(message)
    if said is None:
        return None
    return Sent(said[0], where, session, 1, said[1])


def _stderr(stream: IO[str], name: str) -> Iterator[Sent | Ended]:
    """A stderr log: an entry is a line with a severity, continued by the lines that start with a tab. The
    first LOG line's prefix says how sessions are named (%c, else [%p]); every later line is read so."""
    parts: list[str] = []
    size = 0
    session: str | None = None
    start = 0
    pattern: re.Pattern[str] | None = None
    decided = False
    for number, line in enumerate(stream, 1):
        if line[:1] == "\t":
            if parts and size <= MAX_STATEMENT:
                parts.append(line[1:].rstrip("\r\n"))
                size += len(line)
            continue
        if parts:
            entry = _logged("\n".join(parts), session, f"{name}:{start}")
            if entry is not None:
                yield entry
            parts = []
        at = _log_at(line)
        if at < 0:
            continue
        if not decided:
            decided = True
            pattern = next((p for p in (_SESSION_ID, _PID) if p.search(line, 0, at)), None)
        found = pattern.search(line, 0, at) if pattern is not None else None
        session = found.group(1) if found else None
        parts, size, start = [line[at + 6:].rstrip("\r\n")], len(line), number
    if parts:
        entry = _logged("\n".join(parts), session, f"{name}:{start}")
        if entry is not None:
            yield entry


def _csvlog(stream: IO[str], name: str) -> Iterator[Sent | Ended]:
    csv.field_size_limit(min(sys.maxsize, 1 << 31))
    reader = csv.reader(stream)
    start = 1
    try:
        for row in reader:
            where, start = f"{name}:{start}", reader.line_num + 1
            if not row:
                continue
            if len(row) < _CSVLOG_MIN_FIELDS:
                raise UsageError(f"scan: {where} has {len(row)} fields, not a csvlog row (23 or more); give the "
                                 "whole csvlog file")
            if row[_CSV_SEVERITY] != "LOG":
                continue
            entry = _logged(row[_CSV_MESSAGE], row[_CSV_SESSION] or row[_CSV_PID] or None, where)
            if entry is not None:
                yield entry
    except csv.Error as exc:
        raise UsageError(f"scan: {name}:{reader.line_num} is not CSV ({exc}); give the whole csvlog file") from None


def _jsonlog(stream: IO[str], name: str) -> Iterator[Sent | Ended]:
    for number, line in enumerate(stream, 1):
        if not line.strip():
            continue
        entry = _json_line(line)
        if not isinstance(entry, dict) or not isinstance(entry.get("message"), str):
            raise UsageError(f"scan: {name}:{number} is not a jsonlog entry (a JSON object with a message); give "
                             "the whole jsonlog file")
        if entry.get("error_severity", "LOG") != "LOG":
            continue
        session = entry.get("session_id") or entry.get("pid")
        said = _logged(entry["message"], None if session is None else str(session), f"{name}:{number}")
        if said is not None:
            yield said


def _calls(value: Any, where: str) -> int:
    if value is None or value == "":
        return 1
    try:
        calls = int(value)
    except (TypeError, ValueError):
        raise UsageError(f"scan: {where}: calls is {value!r}, not a whole number; export pg_stat_statements' "
                         "calls column as it is") from None
    if calls < 0:
        raise UsageError(f"scan: {where}: calls is {calls}, less than 0")
    return calls


def _pgss_row(row: dict[str, Any], name: str, number: int) -> Sent:
    query = row.get("query")
    where = f"{name}:{number}"
    if not isinstance(query, str):
        raise UsageError(f"scan: {where} has no query text; export pg_stat_statements' query column")
    queryid = row.get("queryid")
    said = f"{name}: queryid {queryid}" if queryid not in (None, "") else where
    return Sent(query, said, None, _calls(row.get("calls"), where))


def _pgss_csv(stream: IO[str], name: str) -> Iterator[Sent | Ended]:
    csv.field_size_limit(min(sys.maxsize, 1 << 31))
    reader = csv.reader(stream)
    try:
        header = [field.strip().lower() for field in next(reader)]
        if "query" not in header:
            raise UsageError(f"scan: {name}:1 names no query column; export pg_stat_statements with a header")
        start = reader.line_num + 1
        for row in reader:
            number, start = start, reader.line_num + 1
            if not row:
                continue
            if len(row) != len(header):
                raise UsageError(f"scan: {name}:{number} has {len(row)} fields, its header {len(header)}; give the "
                                 "whole export")
            yield _pgss_row(dict(zip(header, row, strict=True)), name, number)
    except csv.Error as exc:
        raise UsageError(f"scan: {name}:{reader.line_num} is not CSV ({exc}); give the whole export") from None


def _pgss_json(stream: IO[str], name: str) -> Iterator[Sent | Ended]:
    first = ""
    while not first.strip():
        chunk = stream.read(1)
        if not chunk:
            return
        first += chunk
    if first.strip() == "[":
        yield from _json_array(stream, name)
        return
    line = first + stream.readline()
    decode = _JsonLines()
    for number, text in enumerate(itertools.chain([line], stream), 1):
        if not text.strip():
            continue
        row = decode(text)
        if not isinstance(row, dict):
            raise UsageError(f"scan: {name}:{number} is not a JSON object; give one pg_stat_statements row per line")
        yield _pgss_row(row, name, number)


#: How much of a JSON array is read at a time.
_CHUNK = 1 << 16


def _json_array(stream: IO[str], name: str) -> Iterator[Sent | Ended]:
    """The objects of one JSON array, decoded one at a time from a sliding buffer (bounded by the largest
    object, not the array)."""
    decoder = json.JSONDecoder()
    buffer, position, count, done = "", 0, 0, False
    while True:
        while position < len(buffer) and buffer[position] in " \t\r\n,":
            position += 1
        if position < len(buffer) and buffer[position] == "]":
            return
        try:
            row, end = decoder.raw_decode(buffer, position)
        except ValueError:
            if done:
                raise UsageError(f"scan: {name}: object {count + 1} of its JSON array is not JSON, or the array has "
                                 "no end; give the whole export") from None
            more = stream.read(_CHUNK)
            done = not more
            buffer, position = buffer[position:] + more, 0
            continue
        count += 1
        if not isinstance(row, dict):
            raise UsageError(f"scan: {name}: item {count} of its JSON array is not an object")
        yield _pgss_row(row, name, count)
        position = end


def sql_files(folder: Path) -> list[Path]:
    """Every .sql file below `folder`, in path order (symbolic links and SKIPPED_FOLDERS left out)."""
    found: list[Path] = []
    for root, dirs, files in os.walk(folder, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_FOLDERS)
        for file in sorted(files):
            path = Path(root) / file
            if file.lower().endswith(".sql") and not path.is_symlink() and path.is_file():
                found.append(path)
    return found


def _sql(path: Path) -> Iterator[Sent | Ended]:
    files = sql_files(path) if path.is_dir() else [path]
    if not files:
        raise UsageError(f"scan: the folder {path} holds no .sql file; give a folder of migrations, a log or an export")
    for file in files:
        if file.stat().st_size > MAX_SQL_FILE:
            raise UsageError(f"scan: {file} is {file.stat().st_size >> 20} MiB, more than the {MAX_SQL_FILE >> 20} MiB "
                             "of SQL read from one file; give migrations, or the server's log of loading it")
        try:
            text = file.read_bytes().decode("utf-8", errors="replace").lstrip("\ufeff")
        except OSError as exc:
            raise UsageError(f"scan: cannot read {file} ({exc.strerror or exc}); fix its permissions") from None
        for start, statement in statements_of(text):
            yield Sent(statement, f"{file}:{text.count(chr(10), 0, start) + 1}")


def statements_of(text: str) -> Iterator[tuple[int, str]]:
    """Each statement of a SQL text with where it starts: as the parser splits it, or (when the text does
    not parse as a whole) at the lexer's semicolons, so one bad statement leaves the others readable."""
    try:
        slices = split(text, only_slices=True)
    except ParseError:
        yield from _at_semicolons(text)
        return
    for part in slices:
        yield part.start, text[part]


def _at_semicolons(text: str) -> Iterator[tuple[int, str]]:
    try:
        tokens = list(scan(text))
    except ParseError:  # an unterminated quote: the rest is one piece
        tokens = []
    start = 0
    for token in tokens:
        if token.name == "ASCII_59":
            piece = text[start:token.start]
            if piece.strip():
                yield start + len(piece) - len(piece.lstrip()), piece.strip()
            start = token.end + 1
    piece = text[start:]
    if piece.strip():
        yield start + len(piece) - len(piece.lstrip()), piece.strip()


