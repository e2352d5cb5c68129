"""What each pooler product is, as data (pure): one `Product` record per product, looked up by its key
(`PoolerKind`), instead of each module branching on the kind. What a product does (its config file, its
process, its console) is provisioning's: provision/products.py, one folder per product.

Adding a pooler: a folder under provision/ whose `product.py` gives its `Product` and its behaviour, and
one row in provision/products.py. The keys ids, gate keys, results files and baselines hold
("pgbouncer", "odyssey", "pgpool", "dsn") never change."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Advice:
    """What the reports tell of a product where the fix is its own setting (reports/rules.py); "" where it has
    none, and the general advice is given."""

    #: keep its reset on a client's exit (`{ini}`: the cell's config file as advice names it)
    handover: str = ""
    #: said before any advice on it: how it shares server connections
    preface: str = ""
    #: what its tracking of prepared statements covers
    prepares_tracked: str = ""
    #: its yes/no setting that keeps protocol-level prepares per client (PgBouncer's, by release, is the rules')
    prepares_setting: str = ""
    #: its own way to pin a LISTEN session, said after the general advice
    listen_pin: str = ""
    #: where it re-applies session parameters, to check when one leaks
    tracked_params: str = ""


@dataclass(frozen=True)
class Product:
    """One pooler product's policies, as the runner, probes, config and reports read them."""

    key: str  #: as ids, keys and results files write it: `pgbouncer`
    title: str  #: as sentences name it: `PgBouncer`
    #: the other names `--pooler` and `--pooler-set` accept for it (the key is always one)
    aliases: tuple[str, ...] = ()
    #: leakcheck starts it (False: a running pooler, reached by --pooled-dsn, that nobody resets)
    started: bool = True
    #: the option that names its versions in messages; "" for `--pooler=KEY:SPEC`
    option: str = ""
    #: it pools per transaction (False: pgpool-II, which runs in its own session mode)
    transaction_pooling: bool = True
    #: setting names are case-insensitive (lower-cased when parsed, as PgBouncer's ini reads them)
    settings_fold_case: bool = False
    #: its pool's size as a sentence gives it, `{size}` filled in
    pool_size_words: str = "pool size {size}"
    #: it promises where A and B land: B gets the server A used last (Scenario.placement_promised)
    promises_placement: bool = False
    #: H, one more client of the pool, may hold a server to place A and B (Scenario.keep_a_home), in
    #: transaction mode, unless one of `pool_shape` is a matrix axis of the cell
    may_hold: bool = False
    #: its settings that decide how many server connections a client may hold
    pool_shape: tuple[str, ...] = ()
    #: its setting that makes it reset a server after every transaction (truthy values: 1 yes on true)
    resets_setting: str = ""
    #: a fleet (--bouncer-fleet: several processes on one port) can be made of it
    fleets: bool = False
    #: it runs with a team's own config file (--bouncer-ini)
    team_file: bool = False
    #: the option naming its containers image template (`--odyssey-image`); "" for none
    image_option: str = ""
    #: the containers backend builds its image when no template is given (PgBouncer's), else one is needed
    image_built: bool = False
    advice: Advice = Advice()


#: Every product leakcheck knows, by key (provision/products.py adds the ones it registers).
PRODUCTS: dict[str, Product] = {}


def register(product: Product) -> Product:
    """Make `product` known by its key and aliases (a key registered again is replaced: the same row)."""
    PRODUCTS[product.key] = product
    return product


def named(name: str) -> Product | None:
    """The product a user's name for it means (`pgpool-ii` -> pgpool-II), or None; a running pooler is
    never named (it is given with --pooled-dsn)."""
    text = name.strip().lower()
    for product in PRODUCTS.values():
        if product.started and (text == product.key or text in product.aliases):
            return product
    return None


def started_keys() -> str:
    """`pgbouncer, odyssey or pgpool`: what a user may name, for messages."""
    keys = [p.key for p in PRODUCTS.values() if p.started]
    return ", ".join(keys[:-1]) + f" or {keys[-1]}" if len(keys) > 1 else "".join(keys)


PGBOUNCER = register(Product(
    "pgbouncer", "PgBouncer", option="--bouncer", settings_fold_case=True,
    pool_size_words="default_pool_size={size}", promises_placement=True,
    resets_setting="server_reset_query_always", fleets=True, team_file=True, image_option="--bouncer-image",
    image_built=True,
    advice=Advice(
        handover="Keep `server_reset_query = DISCARD ALL` in {ini} (the default): in session mode PgBouncer runs "
                 "it when a client leaves, before the next client gets that server connection.",
        prepares_tracked="PgBouncer's `max_prepared_statements` (1.21+) covers only protocol-level prepares",
    ),
))
ODYSSEY = register(Product(
    "odyssey", "Odyssey", may_hold=True, pool_shape=("pool", "pool_size"), image_option="--odyssey-image",
    advice=Advice(
        handover="Keep Odyssey's `pool_discard yes` (or a `pool_discard_query` holding `DISCARD ALL`): it runs "
                 "when a client leaves, before the next client gets that server connection.",
        prepares_tracked="Odyssey's `pool_reserve_prepared_statement` covers only protocol-level prepares",
        prepares_setting="pool_reserve_prepared_statement",
        listen_pin=" (or `pool_pin_on_listen` if your Odyssey release has it)",
        tracked_params="Check Odyssey's `maintain_params` for this route",
    ),
))
PGPOOL = register(Product(
    "pgpool", "pgpool-II", aliases=("pgpool-ii", "pgpool2"), transaction_pooling=False,
    image_option="--pgpool-image",
    advice=Advice(
        handover="Keep `DISCARD ALL` in pgpool-II's `reset_query_list` (its default is `ABORT; DISCARD ALL`): it "
                 "runs when a client disconnects, before the cached backend serves the next session.",
        preface="pgpool-II shares nothing while both clients are connected: this state reached the next client "
                "session on a cached backend, so make `reset_query_list` reset it (e.g. `DISCARD ALL`).",
    ),
))
#: a running pooler, reached by --pooled-dsn (nothing is started); "dsn" as ids, keys and results files say
RUNNING = register(Product("dsn", "the pooler at --pooled-dsn", started=False))
