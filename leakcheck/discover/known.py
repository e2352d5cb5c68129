"""Which existing probe explains a finding: a small explicit mapping from op families to probe ids (pure).

An op's family names the state it creates ('set:work_mem', 'sql_prepare', 'cursor:hold') or, for
ops that only read, remove or end state ('execute', 'discard:ALL', 'commit', 'free'), what it does.
A finding's causes are the state-creating families in its shrunk reproduction (every op there is
needed). It is *known* when every cause is state a probe exercises (`PROBE_OF`), with those probes'
ids; otherwise it is *new*, and the states no probe lists are named (`session:work_mem`). A finding
whose first difference is what an application lost (`outcome:...`, compare.outcomes) is known by the
probe that measures that loss in that shape (`outcome_probe`: a commit lost after a free inside its
transaction is tx_free_before_commit's; a disconnect at a bind, and the other client's move after it,
bind_unprepared's); a write lost after an error reached its client is labelled by the difference that
error is; else it is new by that outcome (`outcome:lost write`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from leakcheck.discover.compare import Diff
from leakcheck.discover.ops import PREPARED, SETTING, SETTINGS, Kind, Op, Who, prepares
from leakcheck.discover.trace import SILENT, Lost
from leakcheck.model.verdicts import Scope, Verdict

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
    if k is Kind.WRITE:
        return "write:prepared" if op.variant == PREPARED else "write"
    return {Kind.PREPARE: "sql_prepare", Kind.PROTOCOL: "protocol_prepare", Kind.LOCK: "advisory_lock",
            Kind.XACT_LOCK: "advisory_xact_lock"}.get(k, str(k))


def causes(ops: Iterable[Op]) -> frozenset[str]:
    """The state-creating families of these ops (a prepared write leaves a prepared statement, as PROTOCOL does)."""
    return frozenset(family(op) for op in ops if op.kind in STATE_KINDS or prepares(op))


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
    if fam == "write:prepared":  # the driver's prepared statement it leaves, as a prepared SELECT's
        return "protocol_prepare"
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
    "sql_prepare": "sql_prepare", "protocol_prepare": "protocol_prepare", "write:prepared": "protocol_prepare",
    "cursor:hold": "with_hold_cursor", "cursor": "plain_cursor",
    "advisory_lock": "advisory_lock", "advisory_xact_lock": "advisory_xact_lock",
    "listen": "listen_notify", "notify": "listen_notify",
}


#: Observations (snapshot keys and op kinds) that are about one kind of state.
EFFECTS: dict[str, frozenset[str]] = {
    "prepared statements": frozenset({"prepared", "prepare", "execute", "deallocate", "deallocate_all", "protocol",
                                      "free", "bind"}),
    "cursors": frozenset({"cursors", "declare", "fetch", "close"}),
    "temp tables": frozenset({"temp", "create_temp", "read_temp", "drop_temp"}),
    "advisory locks": frozenset({"locks", "lock", "xact_lock", "unlock", "unlock_all"}),
    "listen/notify": frozenset({"listening", "notifications", "listen", "unlisten", "notify"}),
    "role": frozenset({"current_user", "session_user", "set_role", "reset_role"}),
    "sequences": frozenset({"nextval", "lastval"}),
    "writes": frozenset({"write"}),
    "transactions": frozenset({"begin", "commit", "rollback"}),
}
_SETTING_KINDS = frozenset({Kind.SET, Kind.SET_LOCAL, Kind.RESET, Kind.SET_CONFIG})
_STATEMENT_ERRORS = ("error 42P05", "error 26000")  # duplicate / undefined prepared statement


def signature(diff: Diff, ops: Sequence[Op]) -> str:
    """What a difference is about: the state its observation reads (a setting by name, else the kind
    of state), and for an op's result also the op (`setting:temp_buffers/set result`: B's SET failed,
    which differs from B reading another client's value, `setting:temp_buffers`). What an application
    lost is its own signature (`outcome:lost write`, `outcome:disconnected`)."""
    key = diff.key
    if key.startswith("outcome:"):
        return key
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
    "protocol_prepare": frozenset({"prepared", "result:protocol", "result:write"}),  # a prepared write collides alike
    "write": frozenset({"prepared", "result:protocol", "result:write"}),  # write:prepared: protocol_prepare's
    "advisory_lock": frozenset({"locks", "result:lock", "result:xact_lock", "result:unlock", "result:unlock_all"}),
    "advisory_xact_lock": frozenset({"locks", "result:lock", "result:xact_lock", "result:unlock"}),
    "listen": frozenset({"listening", "notifications", "result:listen", "result:unlisten", "result:notify"}),
    "notify": frozenset({"listening", "notifications", "result:listen", "result:unlisten", "result:notify"}),
    "nextval": frozenset({"result:nextval", "result:lastval"}),
    "set_role": frozenset({"current_user"}),
}


def _other(who: Who) -> Who:
    return Who.B if who is Who.A else Who.A


#: Kinds of op that give a setting a client's own value (SETTING: A's, B's, or the alternative).
_VALUE_KINDS = frozenset({Kind.SET, Kind.SET_LOCAL, Kind.SET_CONFIG})


def _values_of(who: Who, name: str, ops: Sequence[Op]) -> set[str]:
    """The values `who`'s ops give the setting `name` (its SETTING value, or the alternative)."""
    s = SETTING.get(name)
    if s is None:
        return set()
    return {s.value(who, op.variant == "alt") for op in ops if op.who is who and op.kind in _VALUE_KINDS
            and op.arg == name}


def explains(cause: str, diff: Diff, ops: Sequence[Op]) -> bool:
    """Would the probe of this cause see this difference? A setting's probe reads the setting (or what
    the driver was told) and sees, through the pooler, the value the *other* client gave it (a client
    losing its own value is another effect); read_only's sees the client's writes refused (25006)
    through the pooler only, after the other client set it. Other probes read their own observations
    (OBSERVES)."""
    kind, _, name = state(cause).partition(":")
    if kind in ("session", "local"):
        name = name.removesuffix(":alt")
        theirs = _values_of(_other(diff.who), name, ops)
        if name == "default_transaction_read_only" and theirs and "25006" in diff.subject \
                and "25006" not in diff.reference:
            return True
        return diff.key in (f"setting:{name}", f"reported:{name}") and diff.subject.strip("'") in theirs
    base = cause.split(":")[0]
    return diff.key in OBSERVES.get(base, frozenset())


#: The probes written from earlier discoveries (probes/discovered.py).
DISCOVERED = frozenset({"custom_setting_placeholder", "temp_buffers_blocked"})
#: The probes that measure what an application loses in a statement's lifecycle (probes/transactions.py).
OUTCOME_PROBES = frozenset({"tx_free_before_commit", "bind_unprepared"})


def outcome_probe(ops: Sequence[Op], first: Diff) -> str | None:
    """The probe that measures the loss this first difference shows, in the shape these ops have: a write lost
    at a commit after its client freed a statement inside that transaction (tx_free_before_commit); a client
    disconnected by its bind of a name, or moved after the other client's bind (bind_unprepared)."""
    what = first.key.removeprefix("outcome:")
    before = ops[:first.index]
    if what == Lost.WRITE:
        began = max((i for i, op in enumerate(before) if op.who is first.who and op.kind is Kind.BEGIN), default=None)
        freed = began is not None and any(op.who is first.who and op.kind is Kind.FREE for op in before[began:])
        return "tx_free_before_commit" if freed else None
    if what == Lost.DISCONNECTED and first.index < len(ops) and ops[first.index].kind is Kind.BIND:
        return "bind_unprepared"
    if what == Lost.MOVED and any(op.who is not first.who and op.kind is Kind.BIND for op in before):
        return "bind_unprepared"
    return None


def _discovered(ops: Sequence[Op], first: Diff) -> str | None:
    """The probe written from an earlier discovery that shows this first difference, in its direction
    and with the other client's op behind it: a custom setting's placeholder ('' through the pooler
    where the direct session reads NULL) when only the other client used the name, or the client's
    temp_buffers change refused (22023) through the pooler only after the other client made a temp table."""
    other = _other(first.who)
    if first.key.startswith("setting:") and "." in first.key and (first.subject, first.reference) == ("''", "NULL"):
        name = first.key.removeprefix("setting:")
        users = {op.who for op in ops if op.arg == name and op.kind is not Kind.OBSERVE}
        return "custom_setting_placeholder" if users == {other} else None
    own = ops[first.index] if first.index < len(ops) else None
    if (own is not None and own.who is first.who and signature(first, ops).startswith("setting:temp_buffers/")
            and "22023" in first.subject and "22023" not in first.reference
            and any(op.kind is Kind.CREATE_TEMP and op.who is other for op in ops[:first.index])):
        return "temp_buffers_blocked"
    return None


def _disclosure(found: Iterable[str], diffs: Sequence[Diff]) -> bool:
    """Another client's protocol-level statement read in pg_prepared_statements: prepared_disclosure's."""
    return "protocol_prepare" in found and any(d.key == "prepared" for d in diffs)


def label(ops: Iterable[Op], diffs: Sequence[Diff] = ()) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(probe ids near the finding, what no probe lists). Known when the second is empty: every
    cause is state a probe exercises, and one of those probes observes the first difference (or,
    with no unlisted cause, a probe written from an earlier discovery does). Else the states no probe
    lists are named (`session:work_mem`), after the effect when no cause's own observation shows the
    first difference (`effect: setting:temp_buffers/set_config result`)."""
    ops = tuple(ops)
    if diffs and diffs[0].key.startswith("outcome:"):
        lost = outcome_probe(ops, diffs[0])
        if lost is not None:
            return (lost,), ()
        if diffs[0].key == f"outcome:{Lost.WRITE}" and SILENT not in diffs[0].subject and len(diffs) > 1:
            # an error reached the application first (B's PREPARE of a name A's leaked PREPARE holds): that
            # error is the difference, and the commit its transaction lost follows from it
            return label(ops, diffs[1:])
        return (), (diffs[0].key,)
    found = sorted(causes(ops))
    unlisted = tuple(sorted({state(c) for c in found if c not in PROBE_OF}))
    written = _discovered(ops, diffs[0]) if diffs and not unlisted else None
    if written is not None:
        return (written,), ()
    if not found:  # only reads, resets or transaction control: name what it did
        return (), tuple(dict.fromkeys(family(op) for op in ops if op.kind is not Kind.OBSERVE)) or ("observe",)
    probes = [PROBE_OF[c] for c in found if c in PROBE_OF] + (["prepared_disclosure"] if _disclosure(found, diffs)
                                                               else [])
    probes = list(dict.fromkeys(probes))
    if not diffs or any(explains(c, diffs[0], ops) for c in found):
        return tuple(probes), unlisted
    return tuple(probes), (f"effect: {signature(diffs[0], ops)}", *unlisted)


def _transaction_scoped(probe: str) -> bool:
    from leakcheck.probes import PROBES

    return any(p.id == probe and p.scope is Scope.TRANSACTION for p in PROBES)


def confirmed(ops: Iterable[Op], probes: Sequence[str], unlisted: Sequence[str],
              verdicts: dict[str, Verdict]) -> tuple[str, ...]:
    """What no probe lists, now that the probes `label` gave were measured on this cell. A finding
    whose every cause has a probe stays known only where those probes show it: each session-scoped
    cause needs one of its probes to report a problem on the cell, and some cause must (a probe
    written from an earlier discovery, or one that measures what an application loses, stands
    alone). A transaction-scoped cause (B's pg_try_advisory_xact_lock of a lock A's session holds)
    may be just how the leak of another one is seen; alone, with its probe isolated, the finding is
    new."""
    if unlisted:
        return tuple(unlisted)
    if len(probes) == 1 and probes[0] in DISCOVERED | OUTCOME_PROBES:
        shown = verdicts.get(probes[0], Verdict.SKIPPED)
        return () if shown.is_problem else (f"{probes[0]}: its probe measured {shown} here",)
    found = sorted(causes(ops))
    missing, confirmed_any = [], False
    for cause in found:
        options = [PROBE_OF[cause], *(["prepared_disclosure"] if cause == "protocol_prepare"
                                      and "prepared_disclosure" in probes else [])]
        if any(verdicts.get(p, Verdict.SKIPPED).is_problem for p in options):
            confirmed_any = True
        elif not all(_transaction_scoped(p) for p in options) or len(found) == 1:
            measured = ", ".join(f"{p} {verdicts.get(p, Verdict.SKIPPED)}" for p in options)
            missing.append(f"{cause}: its probe measured {measured} here")
    if not confirmed_any and not missing:
        missing.append("no probe of its causes reports a problem here")
    return tuple(missing)
