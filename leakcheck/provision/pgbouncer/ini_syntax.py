"""PgBouncer's ini syntax, read the way PgBouncer reads it (pure).

A port of `parse_ini_file` in libusual's usual/cfparser.c (the same in PgBouncer 1.18 and 1.24):

- whitespace (space, tab, newline, \\v, \\f, \\r) before anything is skipped, across lines;
- `%include` followed by a space or tab: the rest of the line, trailing whitespace removed, is a
  file name opened as given (relative to the current directory), read in place, 10 levels deep at
  most; a header inside it changes the section for what follows it, in that file and after;
- `#` or `;` first on a line: a comment to the end of the line (nowhere else is either special);
- `[`: a section header up to `]` on the same line, its name exactly as written (no trimming,
  case kept). What follows the `]` is read on as if it began a line: a comment, a setting,
  another header, an `%include`;
- otherwise a key of letters, digits and `_.-*` (possibly none), spaces or tabs, `=`, spaces or
  tabs, and the value: the rest of the line, trailing whitespace removed, kept as written
  (quotes are the value's own). Anything else is a syntax error that stops PgBouncer loading.

What the sections and keys mean is PgBouncer's: see team_ini.py.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from dataclasses import dataclass

from leakcheck.model.errors import UsageError

#: libusual's MAX_INCLUDE: an %include in a file included 10 levels deep stops PgBouncer loading.
MAX_INCLUDE = 10
_SPACE = " \t\n\v\f\r"  # C isspace in the C locale (PgBouncer never calls setlocale)
_BLANK = " \t"
_KEY = frozenset(string.ascii_letters + string.digits + "_.-*")


@dataclass(frozen=True)
class Header:
    """`[name]`; `rest`: what follows its `]` on the same line (PgBouncer reads that on)."""

    name: str
    where: str
    rest: str


@dataclass(frozen=True)
class Assign:
    """`key = value` in whatever section is current when PgBouncer reaches it."""

    key: str
    value: str
    where: str


Event = Header | Assign
#: Reads one file for the parser: (name as written, who asks) -> its text, or a one-line UsageError.
Reader = Callable[[str, str], str]


def parse(name: str, read: Reader, option: str, level: int = 0, via: str | None = None) -> list[Event]:
    """Headers and settings of `name` in PgBouncer's order, includes read in place. `option` names
    the file in errors (`via`: the %include line that names it)."""
    via = via or option
    text = read(name, via)
    out: list[Event] = []
    n, p = len(text), 0

    def where(at: int) -> str:
        return f"{name}:{text.count(chr(10), 0, at) + 1}"

    def line_end(at: int) -> int:
        end = text.find("\n", at)
        return n if end < 0 else end

    while p < n:
        while p < n and text[p] in _SPACE:
            p += 1
        if text.startswith("%include", p) and p + 8 < n and text[p + 8] in _BLANK:
            if level >= MAX_INCLUDE:
                raise UsageError(f"{via}: %include nested more than {MAX_INCLUDE} deep at {where(p)} "
                                 "(PgBouncer stops there); remove the include loop")
            end = line_end(p)
            target = text[p + 8:end].strip(_SPACE)
            out += parse(target, read, option, level + 1, f"{option}: %include at {where(p)}")
            p = end
        elif p < n and text[p] in "#;":
            p = line_end(p)
        elif p < n and text[p] == "[":
            close = p + 1
            while close < n and text[close] not in "]\n":
                close += 1
            if close >= n or text[close] != "]":
                raise _syntax(via, where(p), "a '[' without its ']' on the same line")
            out.append(Header(text[p + 1:close], where(p), text[close + 1:line_end(close)].strip(_SPACE)))
            p = close + 1
        elif p < n:
            start = p
            while p < n and text[p] in _KEY:
                p += 1
            key = text[start:p]
            while p < n and text[p] in _BLANK:
                p += 1
            if p >= n or text[p] != "=":
                raise _syntax(via, where(p), "expected 'key = value' (keys are letters, digits and _.-*)")
            p += 1
            while p < n and text[p] in _BLANK:
                p += 1
            end = line_end(p)
            out.append(Assign(key, text[p:end].rstrip(_SPACE), where(start)))
            p = end
    return out


def _syntax(via: str, at: str, what: str) -> UsageError:
    return UsageError(f"{via}: syntax error at {at}: {what}; PgBouncer stops loading there, fix that line")
