"""How a `leakcheck` command ends: one line and exit code 4 for a LeakcheckError, 130 when interrupted."""

from __future__ import annotations

import sys
from collections.abc import Callable

from . import signals
from .errors import LeakcheckError

EXIT_USAGE = 4  # as pytest's (and the plugin's): a value that cannot be understood or obtained
EXIT_INTERRUPTED = 130


def guarded(body: Callable[[], int]) -> int:
    """Run a command's body; SIGTERM, SIGHUP and SIGQUIT clean up like Ctrl-C while it runs."""
    restore = signals.install()
    try:
        return body()
    except LeakcheckError as exc:
        print(f"leakcheck: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("leakcheck: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        restore()
