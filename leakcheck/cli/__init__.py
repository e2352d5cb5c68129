"""The `leakcheck` command: its subcommands (run, diff, merge, images, ...) and how each one ends."""
