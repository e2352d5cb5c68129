"""Provisioning backends: where PostgreSQL and PgBouncer come from and how they run."""
