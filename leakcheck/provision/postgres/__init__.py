"""PostgreSQL: its binaries, one server per run from a cached template, the probes' roles and objects."""
