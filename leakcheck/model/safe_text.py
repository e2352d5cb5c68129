"""Text from servers (evidence, error messages, log tails) made safe for where it is written.

A server's text is data: an error message or a row can hold any character, and a terminal takes
some of them as commands (ESC starts an escape sequence, CR rewrites a line) while XML 1.0 has no
way to write others at all. Every terminal line and every XML writer goes through one of these,
and every report file through `encodable`.
"""

from __future__ import annotations

import re

#: What a terminal may act on: C0 controls but tab and newline, DEL, C1 controls, the marks that
#: reorder text (bidi overrides and isolates), and lone surrogates (which no encoding can print).
_TERMINAL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
#: What no UTF-8 file can hold.
_SURROGATE = re.compile("[\ud800-\udfff]")
#: What XML 1.0 cannot hold (Char ::= #x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF]),
#: plus DEL, as pytest's --junitxml escapes them.
_XML = re.compile("[^\t\n\r\x20-\x7e\x80-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(text: object, *, newlines: bool = True) -> str:
    """`text` with every character a terminal could act on shown as its escape (`\\x1b`, `\\x0d`,
    `\\u202e`); tabs kept, newlines kept where the layout has several lines (`newlines`), else `\\n`."""
    safe = _TERMINAL.sub(_visible, str(text))
    return safe if newlines else safe.replace("\n", "\\n")


def encodable(text: str) -> str:
    """`text` with any lone surrogate (a results file's JSON can spell one; no UTF-8 file can hold it)
    shown as its escape (`\\ud800`), so a report holding it can still be written."""
    return _SURROGATE.sub(_visible, text)


def xml_safe(text: object) -> str:
    """`text` with what XML 1.0 forbids written as pytest's --junitxml writes it (`#x1B`), so the
    plugin's JUnit report and `leakcheck merge`'s say the same."""
    return _XML.sub(lambda m: f"#x{ord(m.group()):02X}", str(text))
