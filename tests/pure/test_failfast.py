"""A huge failure message is cut before it reaches every report (pure)."""

from leakcheck.model.errors import StartError
from leakcheck.run.failfast import MAX_MESSAGE, shorten


def test_a_huge_message_is_cut_and_says_how_much_was_cut() -> None:
    huge = OSError("x" * (MAX_MESSAGE + 500))
    short = shorten(huge)
    assert isinstance(short, StartError) and len(str(short)) < MAX_MESSAGE + 100
    assert str(short).startswith("OSError: xxx") and str(short).endswith("(500 characters cut)")


def test_a_short_message_and_leakchecks_own_errors_are_kept_as_they_are() -> None:
    small = OSError("disk full")
    own = StartError("PostgreSQL 16.14 did not start: ...\n" + "a long log line\n" * 200)
    assert shorten(small) is small and shorten(own) is own
