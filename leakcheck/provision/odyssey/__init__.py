"""Odyssey: odyssey.conf and one Odyssey process in front of one PostgreSQL."""
