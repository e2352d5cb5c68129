"""Which existing probe explains a finding: a small explicit mapping from op families to probe ids (pure).

An op's family names the state it creates ('set:work_mem', 'sql_prepare', 'cursor:hold') or, for
ops that only read, remove or end state ('execute', 'discard:ALL', 'commit'), what it does. A
finding's causes are the state-creating families in its shrunk reproduction (every op there is
needed). It is *known* when every cause is state a probe exercises (`PROBE_OF`), with those probes'
ids; otherwise it is *new*, and the states no probe lists are named (`session:work_mem`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..verdicts import Scope, Verdict
from .compare import Diff
from .ops import SETTING, SETTINGS, Kind, Op

#: Kinds whose op creates or changes session state: a finding's possible causes.
STATE_KINDS = frozenset({
    Kind.SET, Kind.SET_LOCAL, Kind.SET_CONFIG, Kind.SET_ROLE, Kind.CREATE_TEMP, Kind.NEXTVAL, Kind.PREPARE,
    Kind.PROTOCOL, Kind.DECLARE, Kind.LOCK, Kind.XACT_LOCK, Kind.LISTEN, Kind.NOTIFY,
})


def family(op: Op) -> str:
    """The state an op exercises, the same for A and B."""
    k = op.kind
    if k is Kind.SET:
        return f"set:{op.arg}" + (":alt" if op.variant == "alt" else "")
    if k in (Kind.SET_LOCAL, Kind.RESET):
        return f"{k}:{op.arg}"
    if k is Kind.SET_CONFIG:
        scope, bound = ("local" if "local" in op.variant else "session"), (":bound" if "bound" in op.variant else "")
        return f"set_config_{scope}{bound}:{op.arg}"
    if k is Kind.SET_ROLE:
        return f"set_role:{op.arg}"
    if k is Kind.CREATE_TEMP:
        return "temp_table" + (f":{op.variant.replace(' ', '_')}" if op.variant else "")
    if k is Kind.DECLARE:
        return "cursor:hold" if op.variant == "hold" else "cursor"
    if k is Kind.DISCARD:
        return f"discard:{op.arg}"
    return {Kind.PREPARE: "sql_prepare", Kind.PROTOCOL: "protocol_prepare", Kind.LOCK: "advisory_lock",
            Kind.XACT_LOCK: "advisory_xact_lock"}.get(k, str(k))


def causes(ops: Iterable[Op]) -> frozenset[str]:
    return frozenset(family(op) for op in ops if op.kind in STATE_KINDS)


def state(fam: str) -> str:
    """The session state a family changes: SET x and set_config('x', ..., false), literal or bound,
    change the same `session:x`; SET LOCAL x and set_config('x', ..., true) the same `local:x`."""
    kind, _, rest = fam.partition(":")
    setting = rest.removeprefix("bound:")
    if kind in ("set", "set_config_session"):
        return f"session:{setting}"
    if kind in ("set_local", "set_config_local"):
        return f"local:{setting}"
    if fam == "temp_table:on_commit_delete_rows":  # a session temp table all the same (its rows go at commit)
        return "temp_table"
    return fam


def states(ops: Iterable[Op]) -> frozenset[str]:
    """The states a sequence's state-creating ops change."""
    return frozenset(state(c) for c in causes(ops))


def kind_of(st: str) -> str:
    """A state without the setting it is about (`session:work_mem` -> `session`): signatures name
    the setting already, so an explanation needs only the kinds of state a sequence holds."""
    head = st.split(":", 1)[0]
    return head if head in ("session", "local", "reset") else st


#: The probe a setting's session-level change belongs to (SET, or set_config(..., false)).
SETTING_PROBES = {
    "statement_timeout": "statement_timeout", "lock_timeout": "lock_timeout",
    "idle_in_transaction_session_timeout": "idle_in_transaction_timeout", "search_path": "search_path",
    "TimeZone": "timezone", "DateStyle": "datestyle", "IntervalStyle": "intervalstyle",
    "application_name": "application_name", "default_transaction_read_only": "read_only",
    "session_replication_role": "replication_role",
}

PROBE_OF: dict[str, str] = {
    **{f"set:{name}": probe for name, probe in SETTING_PROBES.items()},
    **{f"set_config_session{b}:{name}": probe for name, probe in SETTING_PROBES.items() for b in ("", ":bound")},
    "set:application_name:alt": "application_name_empty",
    "set:app.tenant": "custom_setting",
    "set_config_session:app.tenant": "rls_tenant", "set_config_session:bound:app.tenant": "rls_tenant",
    # Transaction-scoped changes: the set_local probe's mechanism (the transaction ends), whatever the setting.
    **{f"set_local:{s.name}": "set_local" for s in SETTINGS},
    **{f"set_config_local{b}:{s.name}": "set_local" for s in SETTINGS for b in ("", ":bound")},
    "set_config_local:app.tenant": "rls_tenant_local", "set_config_local:bound:app.tenant": "rls_tenant_local",
    "set_role:leakcheck_other": "set_role", "set_role:leakcheck_priv": "set_role_privileged",
    "temp_table": "temp_table", "temp_table:on_commit_delete_rows": "temp_table",
    "temp_table:on_commit_drop": "temp_table_on_commit_drop",
    "nextval": "lastval",
    "sql_prepare": "sql_prepare", "protocol_prepare": "protocol_prepare",
    "cursor:hold": "with_hold_cursor", "cursor": "plain_cursor",
    "advisory_lock": "advisory_lock", "advisory_xact_lock": "advisory_xact_lock",
    "listen": "listen_notify", "notify": "listen_notify",
}


#: Observations (snapshot keys and op kinds) that are about one kind of state.
EFFECTS: dict[str, frozenset[str]] = {
    "prepared statements": frozenset({"prepared", "prepare", "execute", "deallocate", "deallocate_all", "protocol"}),
    "cursors": frozenset({"cursors", "declare", "fetch", "close"}),
    "temp tables": frozenset({"temp", "create_temp", "read_temp", "drop_temp"}),
    "advisory locks": frozenset({"locks", "lock", "xact_lock", "unlock", "unlock_all"}),
    "listen/notify": frozenset({"listening", "notifications", "listen", "unlisten", "notify"}),
    "role": frozenset({"current_user", "session_user", "set_role", "reset_role"}),
    "sequences": frozenset({"nextval", "lastval"}),
}
_SETTING_KINDS = frozenset({Kind.SET, Kind.SET_LOCAL, Kind.RESET, Kind.SET_CONFIG})
_STATEMENT_ERRORS = ("error 42P05", "error 26000")  # duplicate / undefined prepared statement


def signature(diff: Diff, ops: Sequence[Op]) -> str:
    """What a difference is about: the state its observation reads (a setting by name, else the kind
    of state), and for an op's result also the op (`setting:temp_buffers/set result`: B's SET failed,
    which differs from B reading another client's value, `setting:temp_buffers`)."""
    key = diff.key
    if key.startswith(("setting:", "reported:")):
        return "setting:" + key.split(":", 1)[1]
    what = key.removeprefix("result:")
    if key.startswith("result:") and any(side.startswith(_STATEMENT_ERRORS) for side in (diff.subject, diff.reference)):
        return f"prepared statements/{what} result"  # a named statement exists already / is gone, whatever ran
    op = ops[diff.index] if diff.index < len(ops) else None
    if op is not None and key.startswith("result:") and op.kind in _SETTING_KINDS:
        return f"setting:{op.arg}/{op.kind} result"
    group = next((name for name, members in EFFECTS.items() if what in members), what)
    return f"{group}/{what} result" if key.startswith("result:") else group


#: What each non-setting probe observes: a difference there is what that probe reports.
OBSERVES: dict[str, frozenset[str]] = {
    "temp_table": frozenset({"temp", "result:read_temp", "result:create_temp", "result:drop_temp"}),
    "cursor": frozenset({"cursors", "result:declare", "result:fetch", "result:close"}),
    "sql_prepare": frozenset({"prepared", "result:prepare", "result:execute", "result:deallocate",
                              "result:deallocate_all"}),
    "protocol_prepare": frozenset({"prepared", "result:protocol"}),
    "advisory_lock": frozenset({"locks", "result:lock", "result:xact_lock", "result:unlock", "result:unlock_all"}),
    "advisory_xact_lock": frozenset({"locks", "result:lock", "result:xact_lock", "result:unlock"}),
    "listen": frozenset({"listening", "notifications", "result:listen", "result:unlisten", "result:notify"}),
    "notify": frozenset({"listening", "notifications", "result:listen", "result:unlisten", "result:notify"}),
    "nextval": frozenset({"result:nextval", "result:lastval"}),
    "set_role": frozenset({"current_user"}),
}


def _values(name: str) -> set[str]:
    s = SETTING.get(name)
    return {s.a, s.b, *([s.alt] if s.alt is not None else [])} if s else set()


def explains(cause: str, diff: Diff) -> bool:
    """Would the probe of this cause see this difference? A setting's probe reads the setting (or what
    the driver was told) and sees one client's value where the other's belongs; read_only's sees
    writes refused (25006). Other probes read their own observations (OBSERVES)."""
    kind, _, name = state(cause).partition(":")
    if kind in ("session", "local"):
        name = name.removesuffix(":alt")
        if name == "default_transaction_read_only" and "25006" in diff.subject + diff.reference:
            return True
        shown = {diff.subject.strip("'"), diff.reference.strip("'")}
        return diff.key in (f"setting:{name}", f"reported:{name}") and bool(shown & _values(name))
    base = cause.split(":")[0]
    return diff.key in OBSERVES.get(base, frozenset())


def _discovered(ops: Sequence[Op], diffs: Sequence[Diff]) -> str | None:
    """The probe written from an earlier discovery that shows this finding's first difference:
    a custom setting's placeholder ('' where a session that never used it reads NULL), or
    temp_buffers refused after another client's temp table."""
    if not diffs:
        return None
    first = diffs[0]
    if first.key.startswith("setting:") and "." in first.key and {first.subject, first.reference} == {"''", "NULL"}:
        return "custom_setting_placeholder"
    if signature(first, ops).startswith("setting:temp_buffers/") and any(
            op.kind is Kind.CREATE_TEMP for op in ops) and "22023" in first.subject + first.reference:
        return "temp_buffers_blocked"
    return None


def label(ops: Iterable[Op], diffs: Sequence[Diff] = ()) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(probe ids near the finding, what no probe lists). Known when the second is empty: every
    cause is state a probe exercises, and one of those probes observes the first difference. Else
    the states no probe lists are named (`session:work_mem`), after the effect when no cause's own
    observation shows the first difference (`effect: setting:temp_buffers/set_config result`)."""
    ops = tuple(ops)
    written = _discovered(ops, diffs)
    if written is not None:
        return (written,), ()
    found = sorted(causes(ops))
    probes = [PROBE_OF[c] for c in found if c in PROBE_OF]
    if "protocol_prepare" in found and any(d.key == "prepared" for d in diffs):
        probes.append("prepared_disclosure")
    probes = list(dict.fromkeys(probes))
    if not found:  # only reads, resets or transaction control: name what it did
        return (), tuple(dict.fromkeys(family(op) for op in ops if op.kind is not Kind.OBSERVE)) or ("observe",)
    unlisted = tuple(sorted({state(c) for c in found if c not in PROBE_OF}))
    if not diffs or any(explains(c, diffs[0]) for c in found):
        return tuple(probes), unlisted
    return tuple(probes), (f"effect: {signature(diffs[0], ops)}", *unlisted)


def _transaction_scoped(probe: str) -> bool:
    from ..probes import PROBES

    return any(p.id == probe and p.scope is Scope.TRANSACTION for p in PROBES)


def confirmed(ops: Iterable[Op], diffs: Sequence[Diff], unlisted: Sequence[str],
              verdicts: dict[str, Verdict]) -> tuple[str, ...]:
    """What no probe lists, now that the mapped probes were measured on this cell. A finding whose
    every cause has a probe stays known only where those probes show it: each session-scoped cause
    needs one of its probes to report a problem on the cell, and some cause must. A transaction-scoped
    cause (B's pg_try_advisory_xact_lock of a lock A's session holds) may be just how the leak of
    another one is seen; alone, with its probe isolated, the finding is new."""
    if unlisted:
        return tuple(unlisted)
    written = _discovered(tuple(ops), diffs)
    if written is not None:
        shown = verdicts.get(written, Verdict.SKIPPED)
        return () if shown.is_problem else (f"{written}: its probe measured {shown} here",)
    missing, confirmed_any = [], False
    for cause in sorted(causes(ops)):
        options = [PROBE_OF[cause]]
        if cause == "protocol_prepare" and any(d.key == "prepared" for d in diffs):
            options.append("prepared_disclosure")
        if any(verdicts.get(p, Verdict.SKIPPED).is_problem for p in options):
            confirmed_any = True
        elif not all(_transaction_scoped(p) for p in options) or len(causes(ops)) == 1:
            measured = ", ".join(f"{p} {verdicts.get(p, Verdict.SKIPPED)}" for p in options)
            missing.append(f"{cause}: its probe measured {measured} here")
    if not confirmed_any and not missing:
        missing.append("no probe of its causes reports a problem here")
    return tuple(missing)
