"""Pooler lists and settings axes as users write them, and how axes cross into cells (pure)."""

from pathlib import Path

import pytest

from leakcheck.cli.main import main
from leakcheck.config.config import Config
from leakcheck.model.axes import Axis, check_distinct, combinations, parse_axis, parse_poolers
from leakcheck.model.errors import UsageError
from leakcheck.model.target import Pooler, PoolerKind
from leakcheck.model.versions import Version

BOUNCER = PoolerKind.PGBOUNCER


def test_a_pooler_list_names_kind_and_version_in_the_order_given() -> None:
    given = parse_poolers("odyssey:1.5,pgbouncer:1.26,pgpool-II:4.3,pgbouncer:1.26")
    assert [(k, str(s)) for k, s in given] == [(PoolerKind.ODYSSEY, "1.5"), (BOUNCER, "1.26"),
                                               (PoolerKind.PGPOOL, "4.3")]


def test_a_pooler_may_be_a_path_to_its_binary() -> None:
    [(kind, spec)] = parse_poolers("odyssey:/opt/odyssey/bin/odyssey")
    assert kind is PoolerKind.ODYSSEY and spec.path is not None


@pytest.mark.parametrize("raw", ["1.26", "pgcat:1.0", "odyssey:", "odyssey:1.5,,", "odyssey:x.y"])
def test_a_malformed_pooler_list_is_one_line_saying_the_form(raw: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_poolers(raw)
    assert "\n" not in str(caught.value) and "--pooler" in str(caught.value)


def test_a_setting_axis_keeps_its_values_in_order_without_duplicates() -> None:
    assert parse_axis("max_prepared_statements=0, 200,0", "--bouncer-set", BOUNCER) == Axis(
        BOUNCER, "max_prepared_statements", ("0", "200"))


def test_a_value_holding_a_comma_is_quoted() -> None:
    axis = parse_axis('track_extra_parameters="IntervalStyle,search_path",IntervalStyle', "--bouncer-set", BOUNCER)
    assert axis.values == ("IntervalStyle,search_path", "IntervalStyle")


def test_a_value_may_hold_spaces() -> None:
    assert parse_axis("server_reset_query=DISCARD ALL", "--bouncer-set", BOUNCER).values == ("DISCARD ALL",)


def test_an_empty_value_written_as_two_quotes_is_a_value() -> None:
    axis = parse_axis('server_reset_query="DISCARD ALL",""', "--bouncer-set", BOUNCER)
    assert axis.values == ("DISCARD ALL", "")
    assert parse_axis('server_reset_query=""', "--bouncer-set", BOUNCER).values == ("",)


@pytest.mark.parametrize("raw", ["server_reset_query=DISCARD ALL,", "server_reset_query=", 'x="a,""",,b'])
def test_an_empty_value_not_written_as_two_quotes_is_refused(raw: str) -> None:
    with pytest.raises(UsageError, match='an empty value on purpose is written ""'):
        parse_axis(raw, "--bouncer-set", BOUNCER)


def test_pooler_set_names_the_kind_first() -> None:
    axis = parse_axis("odyssey:pool_discard=yes,no", "--pooler-set", None)
    assert axis == Axis(PoolerKind.ODYSSEY, "pool_discard", ("yes", "no"))


@pytest.mark.parametrize("raw", ["max_prepared_statements", "=0", "max_prepared_statements=", "a b=1", "x=1,,2"])
def test_a_malformed_axis_is_one_line(raw: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_axis(raw, "--bouncer-set", BOUNCER)
    assert "\n" not in str(caught.value)


def test_one_setting_given_twice_is_refused() -> None:
    with pytest.raises(UsageError, match="twice"):
        check_distinct([Axis(BOUNCER, "a", ("1",)), Axis(BOUNCER, "a", ("2",))])


def test_axes_of_one_kind_are_crossed_and_other_kinds_are_left_out() -> None:
    axes = [Axis(BOUNCER, "a", ("1", "2")), Axis(PoolerKind.ODYSSEY, "o", ("x",)), Axis(BOUNCER, "b", ("y", "z"))]
    assert combinations(axes, BOUNCER) == [(("a", "1"), ("b", "y")), (("a", "1"), ("b", "z")),
                                           (("a", "2"), ("b", "y")), (("a", "2"), ("b", "z"))]
    assert combinations(axes, PoolerKind.PGPOOL) == [()]


def test_a_pooler_label_shows_its_settings_and_its_key_form_drops_the_patch_release() -> None:
    pooler = Pooler(BOUNCER, Version((1, 24, 1)), (("max_prepared_statements", "0"),), "/etc/pgbouncer/prod.ini")
    assert pooler.label() == "pgbouncer1.24.1[ini=prod,max_prepared_statements=0]"
    assert pooler.label(2) == "pgbouncer1.24[ini=prod,max_prepared_statements=0]"
    assert Pooler(PoolerKind.RUNNING, None, config="staging").label() == "dsn-staging"


@pytest.mark.parametrize("value", ['"1\rauth_type = trust"', "a\x0bb", "a\u2028b", "a\x85b", "a\x1b[2Jb"])
def test_a_value_with_a_line_break_or_a_control_character_is_refused(value: str) -> None:
    with pytest.raises(UsageError, match="on one line, without control characters"):
        parse_axis(f"application_name_add_host={value}", "--bouncer-set", PoolerKind.PGBOUNCER)


@pytest.mark.parametrize("flag", ["--bouncer-set", "--pooler-set", "--driver-set"])
def test_a_line_break_in_a_repeated_option_is_one_line_not_two_axes(flag: str,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    given = {"--bouncer-set": "max_prepared_statements=0\napplication_name_add_host=1",
             "--pooler-set": "pgbouncer:max_prepared_statements=0\npgbouncer:application_name_add_host=1",
             "--driver-set": "psycopg:prepare_threshold=0\npsycopg:prepared_max=5"}[flag]
    assert main(["run", "--pg=16", "--bouncer=1.24", "--drivers=psycopg", "--probes=timezone", "--controls=no",
                 f"{flag}={given}"]) == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and flag in err and "line break" in err, err


@pytest.mark.parametrize(("table", "value"), [("settings", '"a\\nb"'), ("settings", '"a\\u2028b,1"'),
                                             ("driver", '"1\\n2"'), ("driver", '"1\\u000b2"')])
def test_a_line_break_in_a_matrix_files_value_is_one_line_naming_it(table: str, value: str, tmp_path: Path) -> None:
    body = ('pg = "16"\ndrivers = "psycopg"\n[[pooler]]\nkind = "pgbouncer"\nversions = ["1.24"]\n'
            + (f"settings = {{ application_name_add_host = [{value}, \"c\"] }}\n" if table == "settings" else
               f"[driver_settings]\npsycopg = {{ prepare_threshold = [{value}, \"5\"] }}\n"))
    (tmp_path / "m.toml").write_text(body)
    with pytest.raises(UsageError, match="line break or a control character") as raised:
        Config.from_strings({"leakcheck_matrix": str(tmp_path / "m.toml")})
    assert "m.toml" in str(raised.value) and "\n" not in str(raised.value)
