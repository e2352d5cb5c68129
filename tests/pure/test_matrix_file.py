"""Matrix files: what a team runs, as the options the command line takes (pure, tmp_path)."""

from pathlib import Path

import pytest

from leakcheck.config.config import Config
from leakcheck.config.matrix_file import load, parse
from leakcheck.model.errors import UsageError
from leakcheck.model.target import PoolerKind
from leakcheck.model.versions import Version
from leakcheck.run.matrix import pooler_cells

MATRIX = """\
pg = ["16", "18"]
drivers = ["psycopg"]
probes = ["search_path", "protocol_prepare"]
controls = false
expect = "prod.toml"
require = ["search_path"]

[[pooler]]
kind = "pgbouncer"
versions = ["1.24", "1.26"]
ini = "deploy/pgbouncer.ini"
settings = { max_prepared_statements = ["0", "200"], track_extra_parameters = ["IntervalStyle,search_path"] }

[[pooler]]
kind = "odyssey"
versions = ["1.5"]
"""


def test_a_matrix_file_becomes_the_options_it_names(tmp_path: Path) -> None:
    (tmp_path / "upgrade.toml").write_text(MATRIX)
    raw = load(tmp_path / "upgrade.toml")
    assert raw["leakcheck_pg"] == "16,18" and raw["leakcheck_controls"] == "no"
    assert raw["leakcheck_pooler"] == "pgbouncer:1.24,pgbouncer:1.26,odyssey:1.5"
    assert raw["leakcheck_expect"] == str(tmp_path / "prod.toml")  # relative to the file
    assert raw["leakcheck_bouncer_ini"] == str(tmp_path / "deploy" / "pgbouncer.ini")
    assert raw["leakcheck_pooler_set"].splitlines() == [
        "pgbouncer:max_prepared_statements=0,200", 'pgbouncer:track_extra_parameters="IntervalStyle,search_path"']


def test_the_command_line_wins_over_the_file(tmp_path: Path) -> None:
    text = MATRIX.replace('expect = "prod.toml"\n', "").replace('ini = "deploy/pgbouncer.ini"\n', "")
    (tmp_path / "upgrade.toml").write_text(text)
    config = Config.from_strings({"leakcheck_matrix": str(tmp_path / "upgrade.toml"), "leakcheck_pg": "17"})
    assert [str(s) for s in config.pg] == ["17"]
    assert [k for k, _ in config.poolers] == [PoolerKind.PGBOUNCER, PoolerKind.PGBOUNCER, PoolerKind.ODYSSEY]
    assert {a.name: a.values for a in config.axes}["track_extra_parameters"] == ("IntervalStyle,search_path",)
    assert config.require == frozenset({"search_path"}) and not config.controls


@pytest.mark.parametrize(("text", "message"), [
    ("pg = [16]\nwhat = 1\n", "unknown key(s) what"),
    ("pg = ", "is not TOML"),
    ("[[pooler]]\nkind = \"odyssey\"\n", "needs kind and versions"),
    ("[[pooler]]\nkind = \"odyssey\"\nversions = [\"1.5\"]\nini = \"x.ini\"\n", "ini is a PgBouncer setting"),
])
def test_a_matrix_file_that_is_wrong_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "m.toml").write_text(text)
    with pytest.raises(UsageError) as caught:
        load(tmp_path / "m.toml")
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_the_example_matrix_file_in_matrices_is_a_valid_matrix() -> None:
    path = Path(__file__).parents[2] / "matrices" / "upgrade-16-to-18.toml"
    config = Config.from_strings({"leakcheck_matrix": str(path)})
    assert [str(s) for s in config.pg] == ["16", "18"] and config.expect == path.parent / "native-bookworm.json"
    assert config.require == frozenset({"protocol_prepare", "client_encoding"})


@pytest.mark.parametrize(("entry", "said"), [
    ({"kind": "pgbouncer", "versions": []}, "versions is empty"),
    ({"kind": "pgbouncer", "versions": ["1.24"], "settings": "x"}, "settings is 'x'; give a table"),
    ({"kind": "pgbouncer", "versions": ["1.24"], "settings": ["a", "b"]}, "settings is .*give a table"),
    ({"kind": "pgbouncer", "versions": [1.24]}, 'quote it, e.g. "1.24"'),
])
def test_a_pooler_entry_of_the_wrong_shape_is_one_line_naming_it(entry: dict[str, object], said: str) -> None:
    with pytest.raises(UsageError, match=said):
        parse({"pooler": [entry]}, Path("."), "m.toml")


TWO_TABLES = """\
[[pooler]]
kind = "pgbouncer"
versions = ["1.24"]
settings = { max_prepared_statements = ["0", "200"] }

[[pooler]]
kind = "pgbouncer"
versions = ["1.26"]
ini = "team.ini"
"""


def test_each_pooler_table_gets_only_its_own_settings_and_ini(tmp_path: Path) -> None:
    (tmp_path / "m.toml").write_text(TWO_TABLES)
    (tmp_path / "team.ini").write_text("[pgbouncer]\n")
    config = Config.from_strings({"leakcheck_matrix": str(tmp_path / "m.toml")})
    cells = pooler_cells(config.pooler_tables, lambda kind, spec: Version.parse(spec.raw))
    shown = sorted((str(p.version), p.settings, Path(p.config).name if p.config else "") for p in cells)
    assert shown == [
        ("1.24", (("max_prepared_statements", "0"),), ""),
        ("1.24", (("max_prepared_statements", "200"),), ""),
        ("1.26", (), "team.ini"),
    ]


def test_two_tables_may_cross_the_same_setting_each_with_its_values(tmp_path: Path) -> None:
    text = TWO_TABLES.replace('ini = "team.ini"', 'settings = { max_prepared_statements = ["100"] }')
    (tmp_path / "m.toml").write_text(text)
    config = Config.from_strings({"leakcheck_matrix": str(tmp_path / "m.toml")})
    cells = pooler_cells(config.pooler_tables, lambda kind, spec: Version.parse(spec.raw))
    values = sorted((str(p.version), p.settings[0][1]) for p in cells)
    assert values == [("1.24", "0"), ("1.24", "200"), ("1.26", "100")]


def test_a_pooler_option_on_the_command_line_replaces_the_files_tables(tmp_path: Path) -> None:
    (tmp_path / "m.toml").write_text(TWO_TABLES)
    (tmp_path / "team.ini").write_text("[pgbouncer]\n")
    config = Config.from_strings({"leakcheck_matrix": str(tmp_path / "m.toml"), "leakcheck_bouncer": "1.18"})
    cells = pooler_cells(config.pooler_tables, lambda kind, spec: Version.parse(spec.raw))
    assert [(str(p.version), p.settings, p.config) for p in cells] == [("1.18", (), "")]


FLEETS = """\
pg = ["16"]

[[pooler]]
kind = "pgbouncer"
versions = ["1.24"]
fleet = 2
settings = { peering = ["yes", "no"] }

[[pooler]]
kind = "pgbouncer"
fleet = ["1.24", "1.26"]

[[pooler]]
kind = "pgbouncer"
versions = ["1.18"]
"""


def _config_of(tmp_path: Path, text: str) -> Config:
    (tmp_path / "fleet.toml").write_text(text)
    return Config.from_strings({"leakcheck_matrix": str(tmp_path / "fleet.toml")})


def test_a_pooler_table_takes_a_fleet_of_its_own_and_a_rolling_upgrade_without_versions(tmp_path: Path) -> None:
    config = _config_of(tmp_path, FLEETS)
    cells = pooler_cells(config.pooler_tables, lambda kind, spec: Version.parse(f"{spec.raw}.1"), config.fleet)
    assert [c.label() for c in cells] == [
        "pgbouncer1.24.1x2[peering=yes]", "pgbouncer1.24.1x2[peering=no]",
        "pgbouncer1.24.1+1.26.1", "pgbouncer1.26.1+1.24.1", "pgbouncer1.18.1"]
    assert "cancel_routed" in {p.id for p in config.probes}  # a fleet's own probe: the matrix has a fleet


def test_peering_in_a_table_without_a_fleet_is_one_line_saying_to_add_one(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--bouncer-fleet=2"):
        _config_of(tmp_path, FLEETS.replace("fleet = 2\n", ""))


def test_a_fleet_on_another_pooler_s_table_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="fleet is a PgBouncer setting"):
        _config_of(tmp_path, 'pg = ["16"]\n[[pooler]]\nkind = "odyssey"\nversions = ["1.5"]\nfleet = 2\n')


def test_a_rolling_fleet_whose_versions_differ_from_its_releases_is_one_line(tmp_path: Path) -> None:
    text = 'pg = ["16"]\n[[pooler]]\nkind = "pgbouncer"\nversions = ["1.24"]\nfleet = ["1.24", "1.26"]\n'
    with pytest.raises(UsageError, match="rolling-upgrade fleet runs the releases it names"):
        _config_of(tmp_path, text)


def test_a_fleet_of_one_process_in_a_table_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="fleet"):
        _config_of(tmp_path, FLEETS.replace("fleet = 2", "fleet = 1"))
