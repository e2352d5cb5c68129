"""The vocabulary every layer shares: targets, verdicts, versions, axes, pool settings, errors (pure, no I/O)."""
