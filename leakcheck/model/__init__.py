"""The vocabulary every layer shares: targets, verdicts, versions, axes, errors (pure, no I/O)."""
