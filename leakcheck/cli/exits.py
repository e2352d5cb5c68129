"""How a `leakcheck` command ends: one line and exit code 4 for a LeakcheckError, 1 for a file it could
not read or write, 130 when interrupted."""

from __future__ import annotations

import sys
from collections.abc import Callable

from leakcheck.model.errors import LeakcheckError
from leakcheck.model.safe_text import terminal_safe
from leakcheck.run import signals

EXIT_USAGE = 4  # as pytest's (and the plugin's): a value that cannot be understood or obtained
EXIT_FILE = 1  # the command ran, but a file it had to read or write failed (a full disk, a permission)
EXIT_INTERRUPTED = 130


def guarded(body: Callable[[], int]) -> int:
    """Run a command's body; SIGTERM, SIGHUP and SIGQUIT clean up like Ctrl-C while it runs."""
    restore = signals.install()
    try:
        code = body()
        signals.check()  # an interrupt something swallowed still ends the command as interrupted
        return code
    except LeakcheckError as exc:
        print(terminal_safe(f"leakcheck: error: {exc}"), file=sys.stderr)  # a server's log tail, its error
        return EXIT_USAGE
    except OSError as exc:
        where = f" {exc.filename}" if exc.filename else ""
        print(terminal_safe(f"leakcheck: error: could not use{where}: {exc.strerror or exc}; check the path and "
                            "the disk"), file=sys.stderr)
        return EXIT_FILE
    except KeyboardInterrupt:
        print("leakcheck: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        restore()
