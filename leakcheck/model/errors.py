"""One root error class; every message says what was checked and how to fix it."""

from __future__ import annotations

import re
from collections.abc import Sequence

from leakcheck.model.redact import redacted


class LeakcheckError(Exception):
    """Root of every error leakcheck raises on purpose. Its message never holds a connection string's
    secret (model/redact.py): whatever quoted a DSN, the line printed, logged or written masks it."""

    def __init__(self, *args: object) -> None:
        super().__init__(*(redacted(arg) if isinstance(arg, str) else arg for arg in args))


class UsageError(LeakcheckError):
    """An option or value the user gave cannot be understood."""

    @classmethod
    def bad_value(cls, option: str, value: str, expected: str) -> UsageError:
        return cls(f"{option}={value!r} is not valid: expected {expected}")

    @classmethod
    def empty(cls, option: str, expected: str) -> UsageError:
        """An option given with no value (`--pg=`): never silently the default."""
        return cls(f"{option} is given but empty: give {expected}, or leave {option} out")


class ProvisionError(LeakcheckError):
    """A server binary or image could not be found, fetched or built."""

    @classmethod
    def nothing_worked(cls, what: str, attempts: Sequence[str], hint: str) -> ProvisionError:
        tried = "; ".join(attempts) if attempts else "nothing"
        return cls(f"could not obtain {what}: tried {tried}. {hint}")


class StartError(LeakcheckError):
    """A server was found but did not start (its log tail is in the message)."""

    @classmethod
    def with_log(cls, what: str, reason: str, log: str, hint: str = "") -> StartError:
        """The first line says what failed and the server's own first error (e.g. PgBouncer's
        `unknown parameter: pgbouncer/foo`); then the log's last lines."""
        tail = "\n".join(log.strip().splitlines()[-25:])
        said = first_error(log)
        extra = (f" It said: {said}." if said else "") + (f" {hint}" if hint else "")
        return cls(f"{what} did not start: {reason}.{extra}\n--- last lines of its log ---\n{tail}")


class ProbeError(LeakcheckError):
    """The harness could not run a probe as designed (not a verdict about the pooler)."""


class MachineFault(ProbeError):
    """A step failed because of the machine, not the feature (faults.py): the outcome is an error,
    never a verdict, whatever the probe saw before it."""

    @classmethod
    def during(cls, why: str, error: object) -> MachineFault:
        return cls(f"the machine failed, not the feature ({why}): {one_line(error, 200)}. Nothing was measured: "
                   "fix the machine (disk, memory, server) and run again")


#: What poolers say when they refuse something a probe needs (measured: the pooler's own words).
REFUSALS = (
    "transaction blocks not allowed in statement pooling mode",  # PgBouncer, pool_mode=statement
)


class NotApplicable(ProbeError):
    """The pooler refused what the probe needs (e.g. a transaction block in statement mode): a
    measured, documented outcome, not a harness failure."""

    @classmethod
    def refused(cls, exc: BaseException) -> str | None:
        """The evidence when `exc` (or what caused it) is a pooler's refusal, else None."""
        seen: BaseException | None = exc
        while seen is not None:
            text = str(seen)
            for refusal in REFUSALS:
                if refusal in text:
                    return (f"the pooler refused a step this probe needs: {one_line(text, 200)} "
                            "(the probe needs a transaction block, for its proof or its steps)")
            seen = seen.__cause__ or seen.__context__
        return None


class DriverRefused(NotApplicable):
    """A driver refused to go on with a value its server reported (a catalogue refusal: pgjdbc on a DateStyle
    not ISO, pgx on a client_encoding not UTF8). Not applicable only when the client that set the value refused
    it (Scenario.change marks it `own`), or A refused before B acted; else the value reached an application
    that never set it, which lost its connection: a break (run/runner.py refusal_outcome)."""

    def __init__(self, message: str, who: str, closed: bool) -> None:
        super().__init__(message)
        self.who = who  #: the client whose driver refused
        self.closed = closed  #: its driver closes its connection then
        self.own = False  #: refused at the client's own setting of the value


_SEVERITY = re.compile(r"\b(?:ERROR|FATAL|error|fatal)\b:?\s+(.+)$")


def first_error(log: str) -> str | None:
    """The first ERROR/FATAL message a server logged (timestamp and pid cut), or None."""
    for line in log.splitlines():
        found = _SEVERITY.search(line)
        if found:
            return one_line(found.group(1), 200)
    return None


def one_line(text: object, limit: int = 240) -> str:
    """An exception's text squeezed onto one line for an error message."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."
