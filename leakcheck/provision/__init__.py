"""Provisioning backends: where PostgreSQL and the poolers come from and how they run; one folder per pooler
product, found through provision/products.py."""
