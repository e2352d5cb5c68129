"""What every report calls a verdict and a fact, and what each means (one source for the legends)."""

from __future__ import annotations

import re
from collections.abc import Callable

from leakcheck.model.verdicts import Fact, Outcome, Verdict

_CODE = re.compile(r"`([^`]*)`")


def code_spans(text: str, plain: Callable[[str], str], code: Callable[[str], str]) -> str:
    """Advice text (code between backticks) with its plain parts and its code spans each rendered."""
    out, last = [], 0
    for m in _CODE.finditer(text):
        out += [plain(text[last:m.start()]), code(m.group(1))]
        last = m.end()
    out.append(plain(text[last:]))
    return "".join(out)

_WORD = {
    Verdict.ISOLATED: "isolated",
    Verdict.LEAKS: "LEAKS",
    Verdict.LOST: "LOST",
    Verdict.BREAKS: "BREAKS",
    Verdict.LOSES_WRITES: "LOSES WRITES",
    Verdict.NOT_APPLICABLE: "n/a",
    Verdict.ERROR: "error",
    Verdict.SKIPPED: "skipped",
}

#: One line per verdict, as the verdicts table of docs/concepts.md says it.
MEANING = {
    Verdict.ISOLATED: "the state stayed with the client that set it",
    Verdict.LEAKS: "the other client saw the state, or was affected by it",
    Verdict.LOST: "the client's own state was gone when it ran again",
    Verdict.BREAKS: "using the feature raised errors",
    Verdict.LOSES_WRITES: ("a write the application was told is committed is not in the database, and no error told "
                           "it so: never accepted by a gate"),
    Verdict.NOT_APPLICABLE: "the pooler refused what the probe needs (e.g. a transaction block in statement mode)",
    Verdict.ERROR: "the harness could not measure (no verdict about the pooler: see the evidence)",
    Verdict.SKIPPED: "not run",
}

FACT_MEANING = {
    Fact.BROKE: "a statement of the feature failed",
    Fact.LEAKED: "the other client saw or was affected by the state",
    Fact.LOST: "the client's own state was gone",
    Fact.MISREPORTED: "a driver was told (ParameterStatus) a value the server did not have",
    Fact.RECOVERED: "the driver or pooler got over it by itself (a retry, a re-prepare, a silent replacement)",
    Fact.LOST_WRITE: "a write the application was told is committed was not in the database afterwards",
    Fact.DISCONNECTED: "a client's connection was closed under it",
    Fact.MOVED: "a client was handed another server connection mid-session: its session state stayed behind",
    Fact.OTHER_RESULT: "a call returned another client's result, not the caller's own",
    Fact.STALLED: "a client's call did not return: the pool stalled, or its driver retried for ever",
    Fact.SILENT: "no error reached the application for what it lost",
}

#: A probe's extra properties (Outcome.details, stored under these keys) as a reader names them.
DETAIL = {
    "b_reported": "what B's driver was told (ParameterStatus)",
    "b_server_value": "what B's server had",
    "b_reported_matches_server": "B's driver was told the server's value",
    "cancel_acted_ms": "the cancel acted after (ms)",
}
_YES_NO = {"True": "yes", "False": "no"}


def detail(key: str, value: str) -> tuple[str, str]:
    """A detail in words: its name as DETAIL gives it (else the key, underscores as spaces), yes/no for a flag."""
    return DETAIL.get(key, key.replace("_", " ")), _YES_NO.get(value, value)


SUFFIX = ("+fact: another fact the probe saw besides the verdict's own, e.g. BREAKS+leaked "
          "(broke, leaked, lost, misreported: a driver was told a value the server did not have, recovered: "
          "the driver or pooler got over it by itself; what the application lost: lost_write, disconnected, moved, "
          "other_result, stalled, silent: no error told it)")
SECURITY = "[security]: the state guards data or identity, so a leak exposes it"
MISSING = "-: not measured in this run"


def word(verdict: Verdict) -> str:
    return _WORD[verdict]


def cell(outcome: Outcome) -> str:
    """The verdict, then any other fact it saw: `BREAKS+leaked`, `isolated+misreported`."""
    return "+".join([word(outcome.verdict), *outcome.other_facts])


def flagged(outcome: Outcome) -> bool:
    """A cell a reader must look at: a problem verdict, an error, or a driver told a wrong value."""
    return outcome.verdict.is_problem or outcome.verdict is Verdict.ERROR or Fact.MISREPORTED in outcome.facts
