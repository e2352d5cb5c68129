"""The pytest plugin, driven with pytester: options, errors, and what runs by default."""

import os
import re

import pytest

from leakcheck import plugin
from leakcheck.run.matrix import MatrixRun


def test_without_pg_or_bouncer_no_leak_tests_are_generated(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_plain(): pass")
    result = pytester.runpytest_inprocess("-q")
    result.assert_outcomes(passed=1)
    assert "test_leak" not in result.stdout.str() and "leakcheck matrix" not in result.stdout.str()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pg=sixteen"], "--pg='sixteen' is not valid"),
        (["--pg=16", "--bouncer=1.26,"], "--bouncer='1.26,' is not valid"),
        (["--pg=16", "--drivers=jdbc"], "--drivers='jdbc' is not valid"),
        (["--pg=16", "--probes=nope"], "unknown probe id(s) nope"),
        (["--pg=16", "--controls=maybe"], "--controls='maybe' is not valid"),
        (["--pg=16", "--backend=k8s"], "--backend='k8s' is not valid"),
        (["--pg=16", "--jobs=0"], "--jobs='0' is not valid"),
        (["--pg=16", "--jobs=many"], "--jobs='many' is not valid"),
    ],
)
def test_a_bad_option_value_is_a_one_line_usage_error(
    pytester: pytest.Pytester, args: list[str], message: str
) -> None:
    result = pytester.runpytest_inprocess(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.startswith("ERROR:")]
    assert len(errors) == 1 and message in errors[0]


def test_every_option_is_also_an_ini_key(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nleakcheck_pg = banana\n")
    result = pytester.runpytest_inprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--pg='banana' is not valid" in result.stderr.str()


def test_the_help_lists_the_options_with_their_ini_keys(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess("--help")
    text = result.stdout.str()
    for flag in ("--pg", "--bouncer", "--drivers", "--probes", "--controls", "--backend", "--expect", "--record",
                 "--results", "--jobs"):
        assert flag in text
    assert "leakcheck_pg" in text and "leakcheck_expect" in text


def test_auto_says_in_the_header_which_backend_runs_and_why(pytester: pytest.Pytester,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # Only the header is under test: collection resolves no version (that would fetch PostgreSQL
    # and PgBouncer into an empty cache; tests/servers/test_plugin_matrix.py resolves for real).
    monkeypatch.setattr(MatrixRun, "targets", lambda self: [])
    result = pytester.runpytest_inprocess("--pg=16", "--backend=auto", "--collect-only", "--probes=timezone",
                                          "--drivers=psycopg", "--controls=no")
    cache = os.environ["LEAKCHECK_CACHE"]
    result.stdout.fnmatch_lines(["leakcheck: backend * (auto: *)", f"leakcheck: cache {cache} *"])


def test_a_matrix_option_without_paths_runs_the_matrix_only_not_the_testpaths(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The repository's own case: an ini with testpaths = tests, and the README's main command typed in it.
    monkeypatch.setattr(MatrixRun, "targets", lambda self: [])
    pytester.makeini("[pytest]\ntestpaths = tests\n")
    pytester.mkdir("tests").joinpath("test_own.py").write_text("def test_own(): pass\n")
    matrix_only = pytester.runpytest_inprocess("--pg=16", "--collect-only", "-q", "--controls=no")
    assert "test_own" not in matrix_only.stdout.str()
    named = pytester.runpytest_inprocess("tests", "--pg=16", "--collect-only", "-q", "--controls=no")
    assert "tests/test_own.py::test_own" in named.stdout.str()
    plain = pytester.runpytest_inprocess("--collect-only", "-q")
    assert "tests/test_own.py::test_own" in plain.stdout.str()


def test_a_matrix_option_without_paths_collects_nothing_of_the_folder_it_is_typed_in(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Typed in a clone's parent folder: the clone's conftest (pytest_plugins in a non-root conftest
    # is a collection error) and its tests must not be collected.
    monkeypatch.setattr(MatrixRun, "targets", lambda self: [])
    clone = pytester.mkdir("clone")
    clone.joinpath("conftest.py").write_text('pytest_plugins = ["pytester"]\n')
    clone.joinpath("test_own.py").write_text("def test_own(): pass\n")
    pytester.makepyfile(test_here="def test_here(): pass\n")
    matrix_only = pytester.runpytest_inprocess("--pg=16", "--collect-only", "-q", "--controls=no")
    assert matrix_only.ret == pytest.ExitCode.NO_TESTS_COLLECTED, matrix_only.stdout.str()
    assert "test_own" not in matrix_only.stdout.str() and "test_here" not in matrix_only.stdout.str()
    plain = pytester.runpytest_inprocess("--collect-only", "-q", "test_here.py")
    assert "test_here.py::test_here" in plain.stdout.str()


def test_a_matrix_run_leaves_no_pytest_cache_in_the_folder_it_is_typed_in(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pytest's cacheprovider wrote .pytest_cache/ (its --lf/--nf lists) into whatever folder the README's main
    # command was typed in; the matrix's answer is its reports. A run of tests keeps it.
    monkeypatch.setattr(MatrixRun, "targets", lambda self: [])
    pytester.runpytest_inprocess("--pg=16", "--controls=no")
    assert not (pytester.path / ".pytest_cache").exists()
    pytester.makepyfile(test_here="def test_here(): pass\n")
    pytester.runpytest_inprocess("test_here.py")
    assert (pytester.path / ".pytest_cache").is_dir()


def test_the_drivers_help_names_every_driver_drivers_takes() -> None:
    from leakcheck.config.options import OPTIONS
    from leakcheck.drivers.agents.catalogue import known_drivers

    text = next(help_text for flag, _, help_text, _ in OPTIONS if flag == "--drivers")
    named = set(re.findall(r"[a-z][a-z0-9-]*", text))
    assert [d for d in known_drivers() if d not in named] == []


def test_a_matrix_session_that_never_imported_hypothesis_skips_its_plugins_summary(pytester: pytest.Pytester) -> None:
    # hypothesis' summary imports the whole package (about 1 s where bytecode is not cached) to say nothing
    config = pytester.parseconfigure()
    assert config.pluginmanager.get_plugin(plugin.HYPOTHESIS_PLUGIN) is not None
    plugin._quiet_unused_hypothesis(config, modules={"hypothesis": object()})
    assert config.pluginmanager.get_plugin(plugin.HYPOTHESIS_PLUGIN) is not None
    plugin._quiet_unused_hypothesis(config, modules={})
    assert config.pluginmanager.get_plugin(plugin.HYPOTHESIS_PLUGIN) is None


def test_a_matrix_run_leaves_what_it_made_out_of_the_collectors_sight_at_exit_only(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the interpreter's last collections at exit walked every object of the run: ~0.25 s of a default matrix's end;
    # a process that goes on after a run (an in-process pytest, discovery's labs) keeps collecting
    import gc

    pytester.makeconftest("""
        import atexit, gc, os
        from leakcheck.run.matrix import MatrixRun
        MatrixRun.targets = lambda self: []
        if os.environ.get("SAY_FROZEN_AT_EXIT"):
            atexit.register(lambda: os.write(1, f"frozen at exit: {gc.get_freeze_count() > 0}\\n".encode()))
    """)
    monkeypatch.setenv("SAY_FROZEN_AT_EXIT", "1")
    exited = pytester.runpytest_subprocess("--pg=16", "--controls=no")
    assert "frozen at exit: True" in exited.stdout.str()
    monkeypatch.delenv("SAY_FROZEN_AT_EXIT")
    monkeypatch.setattr(MatrixRun, "targets", lambda self: [])
    gc.unfreeze()
    pytester.runpytest_inprocess("--pg=16", "--controls=no")
    assert gc.get_freeze_count() == 0
