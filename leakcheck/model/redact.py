"""Secrets kept out of every line leakcheck prints or writes: a connection string's password, however
it is written (pure).

The secrets are the parameters libpq itself hides (`PQconndefaults`' display character `*`:
password, sslpassword, oauth_client_secret; a test compares the list with the libpq psycopg loads),
and PGPASSWORD. `redacted` masks them by their shape in any text:

- a URI's user info (`postgresql://user:SECRET@host`), whatever the scheme's case, up to the last `@`
  before the path (libpq reads up to the first, Python's urllib up to the last: both are masked), or,
  when the secret holds a `/`, up to the last `@` before any `=`;
- `key=value`, in a URI's query (the value ends at `&`) or as a libpq keyword (`key = 'quoted value'`,
  else up to a space), the key compared without case, spaces or percent-encoding (`SSLPassword`,
  `ssl%70assword`).

Given the DSNs a message may quote (`redacted(text, dsn)`), every secret value in them (as written
and percent-decoded) is masked wherever it appears too: libpq's own errors quote a piece of a DSN
("invalid percent-encoded token: ...") without its key.
"""

from __future__ import annotations

import re
import urllib.parse

#: libpq's secret parameters (PQconndefaults' dispchar "*", libpq 18), as keywords and URI query keys.
SECRET_KEYS = frozenset({"password", "sslpassword", "oauth_client_secret"})
#: The environment variables libpq reads a secret from.
SECRET_VARIABLES = frozenset({"pgpassword"})
MASK = "***"
#: A value masked already, as a message quotes it ('...?sslpassword=***'): masked again it would lose its quote.
_MASKED = (MASK, f"{MASK}'", f'{MASK}"')

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_KEY = re.compile(r"(?<![\w%.-])([\w%.-]+)\s*=\s*")


def _secret_key(written: str) -> bool:
    key = "".join(urllib.parse.unquote(written).split()).lower()
    return key in SECRET_KEYS or key in SECRET_VARIABLES


def _user_info_secret(text: str, start: int) -> tuple[int, int] | None:
    """Where the password of the URI whose user info starts at `start` is (None: it has none)."""
    end = start
    while end < len(text) and not text[end].isspace():
        end += 1
    token = text[start:end]
    slash = token.find("/")
    at = token.rfind("@", 0, slash if slash >= 0 else len(token))
    if at < 0:  # a '/' in the secret: up to the last '@' that no query's '=' comes before
        equals = token.find("=")
        at = token.rfind("@", 0, equals if equals >= 0 else len(token))
    colon = token.find(":", 0, at) if at >= 0 else -1
    return (start + colon + 1, start + at) if colon >= 0 and at > colon + 1 else None


def _value_end(text: str, start: int, in_query: bool) -> int:
    """Where the value starting at `start` ends: a quoted keyword value at its closing quote, a URI
    query's value at `&`, any other at a space that no backslash escapes."""
    if not in_query and text.startswith("'", start):
        i = start + 1
        while i < len(text) and text[i] != "'":
            i += 2 if text[i] == "\\" else 1
        return min(i + 1, len(text))
    end = start
    while end < len(text) and not text[end].isspace() and not (in_query and text[end] == "&"):
        end += 2 if text[end] == "\\" and not in_query else 1  # libpq: `a\ b` is one value
    return min(end, len(text))


def _spans(text: str) -> list[tuple[int, int]]:
    """Where each secret in `text` is, by its shape."""
    spans = []
    for scheme in _SCHEME.finditer(text):
        found = _user_info_secret(text, scheme.end())
        if found is not None:
            spans.append(found)
    for pair in _KEY.finditer(text):
        if _secret_key(pair.group(1)):
            before = text[pair.start() - 1] if pair.start() else ""
            end = _value_end(text, pair.end(), in_query=before in "?&" and before != "")
            if end > pair.end() and text[pair.end():end] not in _MASKED:
                spans.append((pair.end(), end))
    return spans


def secret_values(dsn: str) -> set[str]:
    """Every secret value `dsn` holds, as written and percent-decoded (quotes and escapes removed)."""
    values = set()
    for start, end in _spans(dsn):
        written = dsn[start:end]
        inner = written[1:-1] if len(written) >= 2 and written[0] == written[-1] == "'" else written
        values |= {written, inner, re.sub(r"\\(.)", r"\1", inner), urllib.parse.unquote(written)}
    return {value for value in values if value}


def redacted(text: str, *dsns: str) -> str:
    """`text` (a DSN, or a message quoting one) with every secret masked; also every secret value of
    `dsns` wherever it appears. Any text: it never raises."""
    masked, last = [], 0
    for start, end in sorted(_spans(text)):
        if start >= last:
            masked += [text[last:start], MASK]
            last = end
    masked.append(text[last:])
    result = "".join(masked)
    for value in sorted({v for dsn in dsns for v in secret_values(dsn)}, key=len, reverse=True):
        result = result.replace(value, MASK)
    return result
