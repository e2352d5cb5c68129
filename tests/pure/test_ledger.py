"""The ledger a server's folder keeps (what leakcheck started there) and the System V tables it is checked against."""

from __future__ import annotations

from pathlib import Path

from leakcheck.provision.host import ledger
from leakcheck.provision.host.sysv import SysvObject, parse_sem, parse_shm

SHM = """       key      shmid perms                  size  cpid  lpid nattch   uid   gid  cuid  cgid      atime      dtime      ctime                   rss                  swap
         0         34   600             134379136  1362  1362      5   101   104   101   104 1796513507 1796513507 1796513507             134381568                     0
   9978572         21   600                    56 28761   306      7   101   104   101   104 1796513466 1796513466 1796513426                  4096                     0
"""  # noqa: E501
SEM = """       key      semid perms      nsems   uid   gid  cuid  cgid      otime      ctime
         0          2   600          9   101   104   101   104          0 1796513507
"""


def test_the_kernels_tables_give_each_objects_id_key_creating_user_creator_and_time() -> None:
    big, small = parse_shm(SHM)
    assert big.obj == SysvObject("shm", 34, 0, 101)
    assert (big.creator, big.attached, big.ctime, big.size) == (1362, 5, 1796513507, 134379136)
    assert small.obj == SysvObject("shm", 21, 9978572, 101) and small.attached == 7
    (sem,) = parse_sem(SEM)
    assert sem.obj == SysvObject("sem", 2, 0, 101)
    assert (sem.size, sem.ctime, str(sem.obj)) == (9, 1796513507, "semaphore set 2")


def test_a_ledger_gives_back_what_was_written_and_skips_a_torn_or_foreign_line(tmp_path: Path) -> None:
    ledger.record_process(tmp_path, 1362, 118521)
    ledger.record_objects(tmp_path, [SysvObject("shm", 34, 0, 101), SysvObject("sem", 2, 0, 101)])
    with open(tmp_path / ledger.LEDGER, "a") as text:
        text.write('"a string"\n[1, 2]\n{"pid": "x"}\n{"msg": 3}\n{"shm": 35, "key"')  # the last one torn by a kill
    started, objects = ledger.read(tmp_path)
    assert started == [ledger.Started(1362, 118521)]
    assert objects == [SysvObject("shm", 34, 0, 101), SysvObject("sem", 2, 0, 101)]
    assert ledger.read(tmp_path / "none") == ([], [])
