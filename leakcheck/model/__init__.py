"""The vocabulary every layer shares: targets, verdicts, versions, axes, pool settings, errors, text made safe
to print, each pooler product's record (pure, no I/O)."""
