"""The containers backend's pure parts: image templates, tarballs, build inputs, PgBouncer's files."""

from __future__ import annotations

from pathlib import Path

import pytest

from leakcheck.model.errors import ProvisionError, UsageError, one_line
from leakcheck.model.pool_settings import PoolMode, PoolSettings
from leakcheck.model.versions import Version
from leakcheck.provision.containers import images as img
from leakcheck.provision.pgbouncer import tarballs

V = Version.parse


def test_an_image_template_takes_the_version_as_asked() -> None:
    assert img.image_name("postgres:{version}", V("16"), "--pg-image") == "postgres:16"
    assert img.image_name("postgres:{version}", V("16.4"), "--pg-image") == "postgres:16.4"


def test_an_image_template_may_use_the_major_version() -> None:
    assert (
        img.image_name("registry.example/pg{major}:latest", V("17.2"), "--pg-image")
        == "registry.example/pg17:latest"
    )


def test_an_image_template_without_fields_names_one_image_for_every_version() -> None:
    assert img.image_name("my/pgbouncer:stable", V("1.24"), "--bouncer-image") == "my/pgbouncer:stable"


@pytest.mark.parametrize(
    "template", ["postgres:{ver}", "postgres:{0}", "postgres:{version", "", "post gres:{version}"]
)
def test_a_bad_image_template_is_a_usage_error_naming_the_option(template: str) -> None:
    with pytest.raises(UsageError, match="--pg-image"):
        img.check_template(template, "--pg-image")


def test_local_tarballs_are_found_in_a_folder_under_upstream_and_debian_names(tmp_path: Path) -> None:
    (tmp_path / "pgbouncer-1.24.1.tar.gz").write_bytes(b"x")
    (tmp_path / "pgbouncer_1.23.1.orig.tar.gz").write_bytes(b"x")
    (tmp_path / "pgbouncer-1.24.1.tar.gz.asc").write_bytes(b"x")
    (tmp_path / "notes.txt").write_text("x")
    found = tarballs.local_tarballs(str(tmp_path))
    assert found == {
        V("1.24.1"): tmp_path / "pgbouncer-1.24.1.tar.gz",
        V("1.23.1"): tmp_path / "pgbouncer_1.23.1.orig.tar.gz",
    }


def test_local_tarballs_may_be_single_files_joined_with_colons(tmp_path: Path) -> None:
    one = tmp_path / "pgbouncer-1.24.1.tar.gz"
    two = tmp_path / "pgbouncer-1.25.0.tar.gz"
    one.write_bytes(b"x")
    two.write_bytes(b"x")
    assert set(tarballs.local_tarballs(f"{one}:{two}")) == {V("1.24.1"), V("1.25.0")}


def test_no_tarball_setting_means_no_local_tarballs() -> None:
    assert tarballs.local_tarballs(None) == {}
    assert tarballs.local_tarballs("") == {}


def test_a_missing_or_misnamed_tarball_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="LEAKCHECK_PGBOUNCER_TARBALLS"):
        tarballs.local_tarballs(str(tmp_path / "absent"))
    odd = tmp_path / "pgbouncer.tgz"
    odd.write_bytes(b"x")
    with pytest.raises(UsageError, match="pgbouncer-X.Y.Z.tar.gz"):
        tarballs.local_tarballs(str(odd))


def test_an_exact_version_is_built_as_asked() -> None:
    assert img.pick_build_version(V("1.24.1"), []) == V("1.24.1")


def test_a_short_version_builds_the_newest_matching_release_available() -> None:
    available = [V("1.24.0"), V("1.24.1"), V("1.25.1"), V("1.2.4")]
    assert img.pick_build_version(V("1.24"), available) == V("1.24.1")


def test_a_short_version_with_no_matching_release_cannot_be_built() -> None:
    assert img.pick_build_version(V("1.23"), [V("1.24.1")]) is None


def test_versions_are_read_back_from_tags_built_earlier() -> None:
    tags = ["leakcheck/pgbouncer:1.24.1", "leakcheck/pgbouncer:1.24", "other/pgbouncer:1.25.0", "postgres:16"]
    assert img.versions_in_tags("leakcheck/pgbouncer:{version}", tags) == [V("1.24.1")]
    assert img.versions_in_tags("leakcheck/pgbouncer:stable", tags) == []


def test_build_args_fill_the_tarball_url_template() -> None:
    args = img.build_args(V("1.24.1"), "debian:bookworm-slim", tarballs.UPSTREAM_TARBALL_URL)
    assert args == {
        "PGBOUNCER_VERSION": "1.24.1",
        "BASE_IMAGE": "debian:bookworm-slim",
        "TARBALL_URL": "https://www.pgbouncer.org/downloads/files/1.24.1/pgbouncer-1.24.1.tar.gz",
    }


def test_the_build_context_holds_the_dockerfile_and_the_local_tarball_under_its_upstream_name(
    tmp_path: Path,
) -> None:
    tarball = tmp_path / "pgbouncer_1.24.1.orig.tar.gz"
    tarball.write_bytes(b"tarball")
    context = tmp_path / "context"
    context.mkdir()
    img.write_build_context(context, V("1.24.1"), tarball)
    assert "ARG PGBOUNCER_VERSION" in (context / "Dockerfile").read_text()
    assert (context / "tarballs" / "pgbouncer-1.24.1.tar.gz").read_bytes() == b"tarball"


def test_the_build_context_without_a_local_tarball_still_has_a_tarballs_folder(tmp_path: Path) -> None:
    img.write_build_context(tmp_path, V("1.24.1"), None)
    assert [p.name for p in (tmp_path / "tarballs").iterdir()] == [".keep"]


def test_the_dockerfile_takes_version_base_image_and_tarball_url_and_runs_unprivileged() -> None:
    text = img.pgbouncer_dockerfile().decode()
    for needed in ("ARG BASE_IMAGE", "ARG PGBOUNCER_VERSION", "ARG TARBALL_URL", "USER pgbouncer"):
        assert needed in text


def test_pgbouncer_in_a_container_listens_everywhere_and_reaches_postgres_by_alias() -> None:
    files = img.bouncer_files(PoolSettings(PoolMode.TRANSACTION, 1), (("leakcheck", "s3cret"), ("leakcheck_app", "x")))
    ini = files["/leakcheck/pgbouncer.ini"].decode()
    assert "leakcheck = host=postgres port=5432 dbname=leakcheck\n" in ini
    assert "listen_addr = 0.0.0.0" in ini
    assert "listen_port = 6432" in ini
    assert "logfile = \n" in ini
    assert "pool_mode = transaction" in ini
    assert "default_pool_size = 1" in ini
    assert "auth_file = /leakcheck/userlist.txt" in ini
    assert files["/leakcheck/userlist.txt"] == b'"leakcheck" "s3cret"\n"leakcheck_app" "x"\n'


@pytest.mark.parametrize(
    ("user", "root"),
    [("", True), ("root", True), ("0", True), ("0:0", True), ("pgbouncer", False), ("999:999", False)],
)
def test_an_image_user_is_root_when_empty_or_zero(user: str, root: bool) -> None:
    assert img.runs_as_root(user) is root


def test_the_published_port_is_read_from_the_loopback_binding() -> None:
    ports = {"5432/tcp": [{"HostIp": "127.0.0.1", "HostPort": "32768"}]}
    assert img.host_port(ports, 5432) == 32768
    assert img.host_port({"5432/tcp": None}, 5432) is None
    assert img.host_port({}, 6432) is None


#: `docker inspect` of a container whose port 6432 was asked on 127.0.0.1 and published there.
PUBLISHED: dict[str, dict[str, object]] = {
    "HostConfig": {"NetworkMode": "leakcheck-1a2b3c4d-pg16", "PortBindings": {"6432/tcp": [{"HostIp": "127.0.0.1",
                                                                                          "HostPort": ""}]}},
    "NetworkSettings": {"Ports": {"6432/tcp": [{"HostIp": "127.0.0.1", "HostPort": "32768"}], "5432/tcp": None}},
}


def test_a_container_published_on_127_0_0_1_only_reaches_nothing_beyond_it() -> None:
    assert img.published_beyond_loopback(PUBLISHED) == []
    assert img.published_beyond_loopback({"HostConfig": {"PortBindings": None}, "NetworkSettings": {}}) == []


@pytest.mark.parametrize(("change", "beyond"), [
    ({"NetworkSettings": {"Ports": {"6432/tcp": [{"HostIp": "127.0.0.1", "HostPort": "32768"},
                                                 {"HostIp": "::", "HostPort": "32768"}]}}}, ["6432/tcp on [::]:32768"]),
    ({"NetworkSettings": {"Ports": {"6432/tcp": [{"HostIp": "0.0.0.0", "HostPort": "32768"}]}}},
     ["6432/tcp on 0.0.0.0:32768"]),
    ({"HostConfig": {"PortBindings": {"6432/tcp": [{"HostIp": "", "HostPort": ""}]}}}, ["6432/tcp on every address"]),
    ({"HostConfig": {"PortBindings": {"9898/tcp": [{"HostPort": "9898"}]}}}, ["9898/tcp on every address:9898"]),
    ({"HostConfig": {"PortBindings": {"6432/tcp": [{"HostIp": "127.0.0.1"}, {"HostIp": "127.0.0.2"}]}},
      "NetworkSettings": {"Ports": {"6432/tcp": [{"HostIp": "127.0.0.1", "HostPort": "32768"},
                                                 {"HostIp": "127.0.0.2", "HostPort": "32769"}]}}},
     ["6432/tcp on 127.0.0.2:32769"]),
    ({"HostConfig": {"NetworkMode": "host"}}, ["the host's network (--network host)"]),
    ({"NetworkSettings": {"Ports": {"6432/tcp": ["0.0.0.0:32768"]}}}, ["6432/tcp on every address"]),
], ids=["ipv6-too", "every-ipv4-address", "asked-everywhere", "another-port", "asked-and-made-named-once",
        "host-network", "unreadable"])
def test_a_port_published_beyond_127_0_0_1_or_the_host_network_is_named(
    change: dict[str, dict[str, object]], beyond: list[str]
) -> None:
    attrs = {key: {**value, **change.get(key, {})} for key, value in PUBLISHED.items()}
    assert img.published_beyond_loopback(attrs) == beyond


@pytest.mark.parametrize(("state", "down"), [
    ({"Status": "running", "Pid": 4242}, None),
    ({"Status": "running", "Pid": 4343}, "it is stopped (SIGSTOP): it cannot answer"),
    ({"Status": "running", "Pid": 0}, None),
    ({"Status": "exited", "ExitCode": 137, "Pid": 0}, "its container exited with code 137"),
    ({"Status": "dead", "ExitCode": 1}, "its container dead with code 1"),
    ({"Status": "paused", "Pid": 4242}, "its container is paused: it cannot answer"),
    ({"Status": "restarting"}, "its container is restarting"),
    ({}, "its container is unknown"),
], ids=["running", "its-process-stopped", "no-pid", "killed", "dead", "paused", "restarting", "no-state"])
def test_a_container_that_no_longer_serves_is_named_by_its_state(state: dict[str, object], down: str | None) -> None:
    assert img.down_in(state, {4343}.__contains__) == down


def test_port_publishing_failures_are_recognised() -> None:
    assert img.is_port_error(
        "driver failed programming external connectivity on endpoint x: bind: address already in use"
    )
    assert img.is_port_error("Bind for 127.0.0.1:5432 failed: port is already allocated")
    assert not img.is_port_error("No such image: postgres:16")


def test_a_failed_build_step_is_summarised_without_repeating_the_command() -> None:
    error = "The command '/bin/sh -c set -eux; \\\n  make' returned a non-zero code: 2"
    assert img.build_error_summary(error) == "a RUN step exited with code 2"
    assert img.build_error_summary("pull access denied") == "pull access denied"


def test_build_logs_lose_colour_codes_and_blank_lines() -> None:
    text = "\x1b[91m+ make\n\x1b[0m\n\nerror: boom\n"
    assert img.build_log_lines(text) == ["+ make", "error: boom"]


def test_a_long_error_is_squeezed_onto_one_line() -> None:
    assert one_line("a\n  b\tc") == "a b c"
    assert one_line("x" * 300, limit=20) == "x" * 17 + "..."


def test_a_missing_dockerfile_says_how_to_fix_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(img, "PGBOUNCER_DOCKERFILE", "dockerfiles/no-such-image/Dockerfile")
    with pytest.raises(ProvisionError, match="--bouncer-image"):
        img.pgbouncer_dockerfile()


def test_only_containers_of_ended_processes_on_this_host_are_stale() -> None:
    engine = pytest.importorskip("leakcheck.provision.containers.engine")
    alive = {100}.__contains__
    assert engine.stale_owner("vm:200", "vm", alive)
    assert not engine.stale_owner("vm:100", "vm", alive)
    assert not engine.stale_owner("other:200", "vm", alive)
    assert not engine.stale_owner("garbage", "vm", alive)


def test_an_unreachable_docker_engine_is_a_one_line_provision_error(monkeypatch: pytest.MonkeyPatch) -> None:
    containers = pytest.importorskip("leakcheck.provision.containers.backend")
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with (
        pytest.raises(
            ProvisionError, match="Docker is not reachable at unix:///nonexistent/docker.sock"
        ) as info,
        containers.ContainersBackend(),
    ):
        pass
    assert "\n" not in str(info.value)


def test_sweep_without_a_reachable_docker_engine_says_so_in_one_line_and_looks_no_further(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("leakcheck.provision.containers.engine")
    from leakcheck.cli.main import _sweep_containers

    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    said: list[str] = []
    assert _sweep_containers(said.append) == []
    out, err = capsys.readouterr()
    assert said == [] and out == ""
    assert err == ("leakcheck: Docker is not reachable at unix:///nonexistent/docker.sock ([Errno 2] No such file or "
                   "directory): no leakcheck container or network was looked for\n")


def test_a_killed_run_s_fleet_folders_are_found_by_its_run_id_and_a_label_that_is_no_run_id_finds_none(
    tmp_path: Path,
) -> None:
    engine = pytest.importorskip("leakcheck.provision.containers.engine")
    for name in ("leakcheck-fleet-1a2b3c4d-x1", "leakcheck-fleet-1a2b3c4d-x2", "leakcheck-fleet-99999999-x1"):
        (tmp_path / name).mkdir()
    (tmp_path / "leakcheck-fleet-1a2b3c4d-file").write_text("")
    (tmp_path / "leakcheck-fleet-1a2b3c4d-link").symlink_to(tmp_path / "leakcheck-fleet-99999999-x1")
    assert engine.fleet_folders("1a2b3c4d", tmp_path) == [tmp_path / "leakcheck-fleet-1a2b3c4d-x1",
                                                          tmp_path / "leakcheck-fleet-1a2b3c4d-x2"]
    assert engine.fleet_folders("*", tmp_path) == engine.fleet_folders("../x", tmp_path) == []
    assert engine.dead_run_line("vm:4242", ["container c1", "network n1"]) == (
        "removed what a killed run (pid 4242) left on the Docker engine: container c1, network n1")


def test_a_path_is_refused_with_a_pointer_to_the_native_backend() -> None:
    containers = pytest.importorskip("leakcheck.provision.containers.backend")
    from leakcheck.model.versions import parse_spec

    with pytest.raises(UsageError, match="--backend=native"):
        containers.ContainersBackend().resolve_pg(parse_spec("/usr/lib/postgresql/16/bin", "--pg"))


@pytest.mark.parametrize(("kind", "option"), [("odyssey", "--odyssey-image"), ("pgpool", "--pgpool-image")])
def test_a_pooler_without_its_image_template_is_refused_naming_the_option(kind: str, option: str) -> None:
    containers = pytest.importorskip("leakcheck.provision.containers.backend")
    from leakcheck.model.target import PoolerKind
    from leakcheck.model.versions import parse_spec

    expected = f"--pooler={kind}:1.5 on the containers backend needs an image: give {option}"
    with pytest.raises(UsageError, match=expected):
        containers.ContainersBackend().resolve_pooler(PoolerKind(kind), parse_spec("1.5", "--pooler"))


def test_a_pooler_binary_path_is_refused_with_a_pointer_to_the_native_backend() -> None:
    containers = pytest.importorskip("leakcheck.provision.containers.backend")
    from leakcheck.model.target import PoolerKind
    from leakcheck.model.versions import parse_spec

    backend = containers.ContainersBackend(odyssey_image="my/odyssey:{version}")
    with pytest.raises(UsageError, match=r"--pooler=odyssey:/usr/bin/odyssey: .*--odyssey-image templates; .*native"):
        backend.resolve_pooler(PoolerKind.ODYSSEY, parse_spec("/usr/bin/odyssey", "--pooler"))


def test_a_bad_pooler_image_template_is_refused_when_the_backend_is_made() -> None:
    containers = pytest.importorskip("leakcheck.provision.containers.backend")
    with pytest.raises(UsageError, match="--pgpool-image"):
        containers.ContainersBackend(pgpool_image="pgpool:{tag}")


@pytest.mark.parametrize(("output", "program", "version"), [
    ("odyssey 1.5.2 release +pam -ldap +systemd -prom\ncompiled by gcc-16.2.0, 64-bit\n", "odyssey", "1.5.2"),
    ("\npgpool-II version 4.3.5 (tamahomeboshi)\n", "pgpool", "4.3.5"),  # printed on stderr
    ("PgBouncer 1.24.1\n", "odyssey", None),
    ("sh: 1: odyssey 1.5.2: not found\n", "odyssey", None),
])
def test_a_pooler_image_s_version_is_its_program_s_own_banner(output: str, program: str, version: str | None) -> None:
    poolers = pytest.importorskip("leakcheck.provision.containers.odyssey_pgpool")
    from leakcheck.model.target import PoolerKind

    found = poolers.banner_version(output, poolers.PROGRAMS[PoolerKind(program)])
    assert found == (V(version) if version else None)
