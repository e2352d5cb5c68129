"""scripts/test's containers step and scripts/ci-docker.sh: what they install, start and leave is said, and what
they started is stopped and cleaned. Docker itself is not started here: the commands the script runs
(ip, iptables, sysctl, docker, and a dockerd it recorded) are stand-ins that show a machine's state and log
what the script changes."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

ROOT = Path(__file__).parents[2]

#: What the network looked like before the script started dockerd (as network_state writes it).
BEFORE = """link virbr0
iptables filter -P INPUT ACCEPT
iptables filter -P FORWARD ACCEPT
iptables filter -P OUTPUT ACCEPT
iptables filter -N LIBVIRT_FWO
iptables filter -A FORWARD -j LIBVIRT_FWO
iptables nat -P PREROUTING ACCEPT
iptables nat -P POSTROUTING ACCEPT
sysctl net.ipv4.ip_forward 0
"""
#: After: what dockerd made (docker0, DOCKER* chains, their rules, FORWARD DROP, ip_forward 1), and a chain
#: and rule someone else added meanwhile (MINE), which must stay.
FILTER_AFTER = """-P INPUT ACCEPT
-P FORWARD DROP
-P OUTPUT ACCEPT
-N DOCKER
-N DOCKER-ISOLATION-STAGE-1
-N DOCKER-USER
-N LIBVIRT_FWO
-N MINE
-A FORWARD -j DOCKER-USER
-A FORWARD -j DOCKER-ISOLATION-STAGE-1
-A FORWARD -o docker0 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A FORWARD -j LIBVIRT_FWO
-A FORWARD -j MINE
-A DOCKER-ISOLATION-STAGE-1 -i docker0 ! -o docker0 -j RETURN
-A DOCKER-USER -j RETURN
"""
NAT_AFTER = """-P PREROUTING ACCEPT
-P POSTROUTING ACCEPT
-N DOCKER
-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER
-A POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE
-A DOCKER -i docker0 -j RETURN
"""
FAKES = {
    "ip": 'if [ "$1" = -o ]; then cat "$FAKE/bridges"; else echo "ip $*" >> "$FAKE/log"; fi',
    "iptables": 'if [ "$3" = -S ]; then cat "$FAKE/iptables-$2"; else echo "iptables $*" >> "$FAKE/log"; fi',
    "ip6tables": 'if [ "$3" = -S ]; then :; else echo "ip6tables $*" >> "$FAKE/log"; fi',
    "sysctl": 'if [ "$1" = -n ]; then echo 1; else echo "sysctl $*" >> "$FAKE/log"; fi',
    "docker": "exit 0",
    "dockerd": "while :; do sleep 1; done",
}


def test_stopping_the_dockerd_it_started_removes_the_bridge_chains_and_rules_dockerd_made_and_nothing_else(
        tmp_path: Path) -> None:
    # It stopped dockerd and left docker0, the DOCKER chains, FORWARD DROP and ip_forward=1 behind.
    bin_dir, fake = tmp_path / "bin", tmp_path / "fake"
    bin_dir.mkdir()
    fake.mkdir()
    for name, body in FAKES.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    (fake / "bridges").write_text("2: virbr0: <BROADCAST,MULTICAST,UP> mtu 1500\n3: docker0: <NO-CARRIER> mtu 1500\n")
    (fake / "iptables-filter").write_text(FILTER_AFTER)
    (fake / "iptables-nat").write_text(NAT_AFTER)
    state = tmp_path / "state" / "dockerd.pid"
    state.parent.mkdir()
    (state.parent / "dockerd.pid.net").write_text(BEFORE)
    dockerd = subprocess.Popen([str(bin_dir / "dockerd")])
    reaper = threading.Thread(target=dockerd.wait)  # reaped once it ends, as init reaps the real one
    reaper.start()
    try:
        state.write_text(f"{dockerd.pid}\n")
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE": str(fake),
               "LEAKCHECK_DOCKERD_STATE": str(state)}
        done = subprocess.run(["bash", str(ROOT / "scripts" / "ci-docker.sh"), "stop"], env=env, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        reaper.join(timeout=10)
        assert dockerd.returncode is not None  # the script stopped it
    finally:
        dockerd.kill()
        reaper.join()
    log = (fake / "log").read_text().splitlines()
    assert sorted(log) == sorted([
        "iptables -t filter -D FORWARD -j DOCKER-USER",
        "iptables -t filter -D FORWARD -j DOCKER-ISOLATION-STAGE-1",
        "iptables -t filter -D FORWARD -o docker0 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
        "iptables -t filter -D DOCKER-ISOLATION-STAGE-1 -i docker0 ! -o docker0 -j RETURN",
        "iptables -t filter -D DOCKER-USER -j RETURN",
        "iptables -t filter -P FORWARD ACCEPT",
        "iptables -t nat -D PREROUTING -m addrtype --dst-type LOCAL -j DOCKER",
        "iptables -t nat -D POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE",
        "iptables -t nat -D DOCKER -i docker0 -j RETURN",
        *(f"iptables -t filter -{op} {chain}" for op in "FX"
          for chain in ("DOCKER", "DOCKER-ISOLATION-STAGE-1", "DOCKER-USER")),
        "iptables -t nat -F DOCKER", "iptables -t nat -X DOCKER",
        "ip link delete docker0",
        "sysctl -q -w net.ipv4.ip_forward=0",
    ])
    assert "removed what dockerd made: 1 bridge(s), 4 iptables chain(s) and their rules" in done.stderr
    assert not state.exists() and not (state.parent / "dockerd.pid.net").exists()


def test_scripts_test_says_in_one_line_what_the_containers_step_installs_starts_and_leaves() -> None:
    text = (ROOT / "scripts" / "test").read_text()
    said = text.index('echo "scripts/test: the containers backend next: installs docker.io and debootstrap')
    assert said < text.index("scripts/ci-docker.sh run scripts/test-containers")
    step = text[said:text.index(">&2", said)]
    for what in ("they stay", "starts dockerd", "iptables chains removed", "leakcheck-local/* images",
                 "scripts/ci-docker.sh clean", "LEAKCHECK_SKIP_CONTAINERS=1"):
        assert what in step
