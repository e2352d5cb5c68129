"""pgpool-II: its configuration files and one pgpool-II process in front of one PostgreSQL."""
