"""The registry of pooler products: one row per product folder. Backends, config, the runner and reports
look a product up here by its kind (or read its record, model/products.py) instead of branching on it.

Adding a pooler: a folder `provision/<product>/` whose `product.py` gives `PRODUCT` (its record and its
behaviour: provision/product.py), and one row below."""

from __future__ import annotations

from leakcheck.model import products as records
from leakcheck.model.target import PoolerKind
from leakcheck.provision.odyssey import product as odyssey
from leakcheck.provision.pgbouncer import product as pgbouncer
from leakcheck.provision.pgpool import product as pgpool
from leakcheck.provision.product import PoolerProduct

#: Every product leakcheck starts, by key (a running pooler, --pooled-dsn, has none: nothing is started).
PRODUCTS: dict[str, PoolerProduct] = {}


def register(product: PoolerProduct) -> PoolerProduct:
    """Make the product known here and its record in model/products.py (the same key again: replaced)."""
    records.register(product.record)
    PRODUCTS[product.record.key] = product
    return product


def product(kind: PoolerKind) -> PoolerProduct:
    """The product of a kind leakcheck starts (KeyError for a running pooler's)."""
    return PRODUCTS[kind.value]


register(pgbouncer.PRODUCT)
register(odyssey.PRODUCT)
register(pgpool.PRODUCT)
