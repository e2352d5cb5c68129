"""leakcheck's preloader for a Python agent (docs/agent-protocol.md, "Preloaded agents"; django/ and
sqlalchemy/ run this file beside their agent.py): as gunicorn --preload forks an application's workers from
one process that imported it, the agent's imports (its ORM, psycopg, the agent's own code) are loaded once,
here, and each agent is a fork of this process: its own process, session and connections. This process
never connects and runs no thread, so a fork holds no lock another thread took and shares no connection.

Requests come on a SOCK_SEQPACKET socket leakcheck passes as an open file (one message each; the protocol
of activerecord/preload.rb, read by leakcheck/drivers/agents/preload.py):
  "fork TAG" with 3 descriptors (the new agent's stdin, stdout, stderr) -> "PID" once the child has made
    itself a session (and process group) leader; it sets LEAKCHECK_AGENT=TAG, takes the three as its
    stdin/stdout/stderr and runs the agent;
  "reap PID" -> "STATUS" (its exit status, -SIGNAL when killed; "" while it runs; "gone"): a child stays a
    zombie until leakcheck asks, so its pid (and process group id) is not reused while leakcheck signals it.
The end of the socket (leakcheck ended, or stopped this preloader) ends it; its children end with the end of
their stdin. What differs per process is made after the fork: Python reseeds `random` in a child (and
libpq's SCRAM nonces come from OpenSSL, which reseeds in a child); psycopg and the ORM make their
connections, pools and engines at the child's first connect.
"""

from __future__ import annotations

import gc
import os
import socket
import sys
import threading
import traceback
from collections.abc import Callable

#: The agent's variable for its tag (leakcheck/provision/host/tagged.py, VARIABLE).
TAG = "LEAKCHECK_AGENT"


def serve(fd: int, agent: Callable[[], None]) -> None:
    """Answer the requests on socket `fd` until its end; `agent` is what each fork runs (its request loop)."""
    if threading.active_count() > 1:  # a fork would copy locks those threads may hold, not the threads
        names = ", ".join(thread.name for thread in threading.enumerate() if thread is not threading.main_thread())
        sys.exit(f"the agent's imports started threads ({names}): its agents cannot be forked from it")
    link = socket.socket(fileno=fd)
    gc.collect()
    gc.freeze()  # what the forks share stays shared: their collections leave these objects' pages alone
    while True:
        message, fds, _, _ = socket.recv_fds(link, 256, 3)
        if not message:
            break
        op, _, arg = message.decode(errors="replace").partition(" ")
        try:
            if op == "fork":
                answer = spawn(link, fds, arg, agent)
            elif op == "reap":
                answer = reap(int(arg))
            else:
                answer = f"error: unknown request {op}"
        except (OSError, ValueError) as exc:  # (a fork the system refused: leakcheck starts the agent itself)
            answer = f"error: {op}: {exc}"
        finally:
            for each in fds:
                os.close(each)
        link.send(answer.encode())


def spawn(link: socket.socket, fds: list[int], tag: str, agent: Callable[[], None]) -> str:
    """A fork that runs `agent` on `fds` as its stdin, stdout and stderr, tagged `tag`: its pid."""
    if len(fds) != 3:
        return f"error: fork takes 3 descriptors, got {len(fds)}"
    ready, made = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(ready)
        os.close(made)
        raise
    if pid == 0:
        code = 1
        try:
            os.close(ready)
            link.close()
            os.setsid()
            os.close(made)  # (the parent answers once this end closes: the child leads its own group)
            for number, fd in enumerate(fds):
                os.dup2(fd, number)  # (the preloader's own 0, 1, 2 are open: each fd is above 2)
                os.close(fd)
            os.environ[TAG] = tag
            agent()
            code = 0
        except SystemExit as exc:  # as the interpreter's own exit takes it
            if exc.code is None or isinstance(exc.code, int):
                code = exc.code or 0
            else:
                print(exc.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    code = code or 1
            os._exit(code)  # never back into the preloader's loop, nor its interpreter's exit
    os.close(made)
    os.read(ready, 1)  # its end: the child called setsid (or died)
    os.close(ready)
    return str(pid)


def reap(pid: int) -> str:
    """`pid`'s exit status (-SIGNAL when a signal ended it), collected; "" while it runs."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return "gone"
    return str(os.waitstatus_to_exitcode(status)) if done else ""
