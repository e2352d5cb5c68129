"""Which errors a probe sees are the machine's, not the feature's: those are never a verdict.

A probe turns the errors its steps raise into facts (`broke`, sometimes `leaked` or `lost`). An
error the machine caused (a full disk, no memory, a crashed server, a connection that broke) says
nothing about the pooler: the outcome is *error*, which no baseline records. The rule is one table
keyed by SQLSTATE class, or by one code where a class mixes both kinds; the most specific entry
wins, and a class not listed is the feature's (a measurement). docs/concepts.md's "Verdicts" section
shows the same table.
"""

from __future__ import annotations

from enum import StrEnum


class Kind(StrEnum):
    """What an error of one SQLSTATE says about the probe's run."""

    MEASURED = "measured"  #: the feature's own answer: a fact of the probe (e.g. breaks)
    MACHINE = "machine"  #: the machine failed: no verdict, whatever the probe saw before
    SESSION_END = "session_end"  #: the session ended under the client: measured only where a probe observes that


#: (class or code, kind, why). Classes of the SQL standard and PostgreSQL's appendix A.
RULES: tuple[tuple[str, Kind, str], ...] = (
    ("53", Kind.MACHINE, "insufficient resources: disk full, out of memory, too many connections, a configured "
                         "limit such as temp_file_limit"),
    ("58", Kind.MACHINE, "system error: an I/O error, a file under the data directory missing or duplicated"),
    ("XX", Kind.MACHINE, "internal error: data or an index corrupted, or a server bug"),
    ("F0", Kind.MACHINE, "configuration file error"),
    ("57P02", Kind.MACHINE, "crash shutdown: another server process crashed, the server is restarting"),
    ("57P03", Kind.MACHINE, "cannot connect now: the server is starting, stopping or in recovery"),
    ("57P04", Kind.MACHINE, "database dropped while the probe ran (no probe drops one)"),
    ("08", Kind.SESSION_END, "connection exception: the connection broke or was closed"),
    ("57P01", Kind.SESSION_END, "admin shutdown: pg_terminate_backend, a pooler's KILL, or the server stopping"),
    ("57P05", Kind.SESSION_END, "idle_session_timeout ended the session"),
    ("25P03", Kind.SESSION_END, "idle_in_transaction_session_timeout ended the session"),
    ("57014", Kind.MEASURED, "query canceled: statement_timeout or a cancel request, which probes measure"),
)

#: The drivers' SQLSTATE for an error the server never named (clients.py): a closed connection,
#: a decoding failure. Only a closed connection is a session end.
NO_SQLSTATE = "?????"


def kind(sqlstate: str, *, closed: bool = False) -> tuple[Kind, str]:
    """The kind of an error with this SQLSTATE and why; `closed`: the client's connection is gone."""
    code = sqlstate.upper()
    for key in (code, code[:2]):
        for rule, found, why in RULES:
            if rule == key:
                return found, why
    if closed:
        return Kind.SESSION_END, "the connection is closed (the driver gave no SQLSTATE)"
    return Kind.MEASURED, "the feature's own error"


def machine_fault(sqlstate: str, *, closed: bool = False, session_end_observed: bool = False) -> str | None:
    """Why an error with this SQLSTATE is the machine's failure, not the feature's; None: a measurement.

    A session end (class 08, 57P01, 57P05, 25P03, a closed connection) is a machine fault unless
    the probe's step observes exactly that (`session_end_observed`: idle_in_transaction_timeout).
    """
    found, why = kind(sqlstate, closed=closed)
    if found is Kind.MACHINE or (found is Kind.SESSION_END and not session_end_observed):
        return f"{'no SQLSTATE' if sqlstate == NO_SQLSTATE else 'SQLSTATE ' + sqlstate}: {why}"
    return None
