"""The vocabulary every layer shares: targets, verdicts, versions, axes, pool settings, errors, text made safe
to print (pure, no I/O)."""
