"""One root error class; every message says what was checked and how to fix it."""

from __future__ import annotations

from collections.abc import Sequence


class LeakcheckError(Exception):
    """Root of every error leakcheck raises on purpose."""


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
        tail = "\n".join(log.strip().splitlines()[-25:])
        extra = f" {hint}" if hint else ""
        return cls(f"{what} did not start: {reason}.{extra}\n--- last lines of its log ---\n{tail}")


class ProbeError(LeakcheckError):
    """The harness could not run a probe as designed (not a verdict about the pooler)."""


def one_line(text: object, limit: int = 240) -> str:
    """An exception's text squeezed onto one line for an error message."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."
