"""odyssey.conf: the probe's pool per role, password auth, a console, extra settings where they belong."""

from __future__ import annotations

import re

import pytest

from leakcheck.model.errors import UsageError
from leakcheck.model.pool_settings import PoolMode, PoolSettings
from leakcheck.provision.odyssey.conf import OdysseyLayout, render_odyssey_conf, start_error, value_of

ROLES = (("leakcheck", "pw-admin"), ("leakcheck_app", "pw-app"))
LAYOUT = OdysseyLayout(listen_port=7432, server_host="127.0.0.1", server_port=5432, dbname="leakcheck",
                       admin="leakcheck", credentials=ROLES)


def block(text: str, header: str) -> str:
    """The body of the first block opened by `header {` (braces balanced)."""
    start = text.index(header + " {") + len(header) + 2
    depth, at = 1, start
    while depth:
        depth += {"{": 1, "}": -1}.get(text[at], 0)
        at += 1
    return text[start : at - 1]


def rule(text: str, role: str) -> list[str]:
    return [line.strip() for line in block(block(text, 'database "leakcheck"'), f'user "{role}"').splitlines()
            if line.strip()]


def top_level(text: str) -> list[str]:
    return [line for line in text.split("\nlisten {")[0].splitlines() if line]


def test_each_role_gets_a_transaction_pool_of_one_with_its_password_to_clients_and_to_the_server() -> None:
    text = render_odyssey_conf(PoolSettings(), (), LAYOUT)
    for role, password in ROLES:
        assert rule(text, role) == [
            'authentication "md5"', f'password "{password}"', 'storage "postgres_server"',
            f'storage_password "{password}"', 'pool "transaction"', "pool_size 1",
        ]


def test_session_mode_and_the_pool_size_are_the_probe_s() -> None:
    assert rule(render_odyssey_conf(PoolSettings(PoolMode.SESSION, 2), (), LAYOUT), "leakcheck_app")[-2:] == [
        'pool "session"', "pool_size 2"]


def test_it_listens_on_loopback_only_and_its_storage_is_the_server() -> None:
    text = render_odyssey_conf(PoolSettings(), (), LAYOUT)
    assert block(text, "listen").split() == ['host', '"127.0.0.1"', "port", "7432"]
    assert block(text, 'storage "postgres_server"').split() == ['type', '"remote"', 'host', '"127.0.0.1"',
                                                                 'port', '5432']


def test_the_console_needs_the_admin_s_password() -> None:
    console = block(render_odyssey_conf(PoolSettings(), (), LAYOUT), 'database "console"')
    assert 'user "leakcheck"' in console and 'password "pw-admin"' in console
    assert 'role "admin"' in console and 'storage "local"' in console and 'authentication "md5"' in console


def test_the_global_section_has_what_odyssey_requires_and_no_pooling_setting() -> None:
    lines = top_level(render_odyssey_conf(PoolSettings(), (), LAYOUT))
    assert any(line.startswith("log_format ") for line in lines)
    assert not any(re.match(r"pool|maintain_params|reserve", line) for line in lines)


def test_a_rule_level_extra_setting_goes_into_every_role_s_rule() -> None:
    text = render_odyssey_conf(PoolSettings(), (("pool_reserve_prepared_statement", "no"),
                                                ("pool_discard", "yes")), LAYOUT)
    for role, _ in ROLES:
        assert rule(text, role)[-2:] == ["pool_reserve_prepared_statement no", "pool_discard yes"]
    assert "pool_discard yes" not in top_level(text)


def test_any_other_extra_setting_goes_into_the_global_section() -> None:
    text = render_odyssey_conf(PoolSettings(), (("workers", "2"), ("no_such_setting", "on")), LAYOUT)
    assert top_level(text)[-2:] == ["workers 2", 'no_such_setting "on"']
    assert "workers 2" not in block(text, 'database "leakcheck"')


def test_an_extra_setting_named_like_one_of_leakcheck_s_replaces_it() -> None:
    text = render_odyssey_conf(PoolSettings(), (("pool_size", "3"), ("log_stats", "yes")), LAYOUT)
    assert rule(text, "leakcheck_app").count("pool_size 3") == 1 and "pool_size 1" not in text
    assert top_level(text).count("log_stats yes") == 1 and "log_stats no" not in text


@pytest.mark.parametrize(("given", "written"), [
    ("yes", "yes"), ("no", "no"), ("100", "100"), ("-1", "-1"), ("DISCARD ALL", '"DISCARD ALL"'),
    ('"0755"', '"0755"'), ("a\\b", '"a\\b"'),  # Odyssey keeps a backslash as written
])
def test_values_are_written_in_odyssey_s_syntax(given: str, written: str) -> None:
    assert value_of(given) == written


@pytest.mark.parametrize(("bad", "said"), [("line\nbreak", "line break or NUL"), ("nul\0", "line break or NUL"),
                                           ('say "hi"', "double quote"), ("a\\", "end with a lone backslash")])
def test_a_value_odyssey_cannot_hold_as_written_is_refused(bad: str, said: str) -> None:
    with pytest.raises(UsageError, match=said):
        render_odyssey_conf(PoolSettings(), (("pool_discard_query", bad),), LAYOUT)


@pytest.mark.parametrize("bad", ["two words", "", "x\ny", "1abc", 'a"b'])
def test_a_name_that_is_no_name_is_refused_but_unknown_names_are_odyssey_s_to_judge(bad: str) -> None:
    with pytest.raises(UsageError, match="not a setting name"):
        render_odyssey_conf(PoolSettings(), ((bad, "1"),), LAYOUT)
    assert "zz_unknown 1" in render_odyssey_conf(PoolSettings(), (("zz_unknown", "1"),), LAYOUT)


def test_a_pool_of_zero_is_refused() -> None:
    with pytest.raises(ValueError, match="pool_size"):
        render_odyssey_conf(PoolSettings(pool_size=0), (), LAYOUT)


def test_a_start_error_is_odyssey_s_message_with_the_line_it_counts_from_zero() -> None:
    config = "daemonize no\nno_such_setting 1\nworkers 1\n"
    log = ("18137 2026-12-01T08:14:45Z info (startup) none Starting Odyssey\n"
           "18137 2026-12-01T08:14:45Z error (config) none /tmp/x/odyssey.conf:1 unknown parameter\n")
    assert start_error(log, config) == ("/tmp/x/odyssey.conf:1 unknown parameter "
                                        "(Odyssey counts lines from 0: `no_such_setting 1`)")


def test_a_start_error_without_a_line_is_odyssey_s_message_alone() -> None:
    log = "1 2026-12-01T08:02:55Z error (config) none log_format is not defined\nAborted\n"
    assert start_error(log, "") == "log_format is not defined"
    assert start_error("1 2026-12-01T08:02:55Z info (startup) none Starting Odyssey\n", "") is None
