"""PgBouncer: releases, downloads, builds, pgbouncer.ini and a team's ini, its admin console, its process."""
