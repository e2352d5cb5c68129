"""The clients the probes drive (psycopg and asyncpg behind one small async interface)."""
