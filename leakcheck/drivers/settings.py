"""The driver settings `--driver-set DRIVER:NAME=V1,V2` makes matrix axes: each driver's known
names with their defaults, the values psycopg and asyncpg are given, and which values are the
defaults (a cell with the driver's defaults keeps its id: nothing is written for them).

An agent's known settings are its spec's (catalogue.py), a team agent's those its hello lists
(team.py); it receives them as texts in its connect request (docs/agent-protocol.md). psycopg's
are attributes of the connection, asyncpg's keyword arguments of `asyncpg.connect`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from leakcheck.drivers.agents.catalogue import shipped
from leakcheck.drivers.agents.team import registered
from leakcheck.model.axes import DriverAxis
from leakcheck.model.errors import UsageError
from leakcheck.model.target import Setting


def _count(text: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise ValueError("a whole number such as 0 or 100")
    return int(text)


def _count_or_none(text: str) -> int | None:
    if text == "None":
        return None
    try:
        return _count(text)
    except ValueError:
        raise ValueError("a whole number such as 5, or None (never prepare)") from None


#: psycopg's and asyncpg's settings: (name, default as text, the value the driver is given)
NATIVE: dict[str, tuple[tuple[str, str, Callable[[str], Any]], ...]] = {
    "psycopg": (("prepare_threshold", "5", _count_or_none), ("prepared_max", "100", _count)),
    "asyncpg": (("statement_cache_size", "100", _count), ("max_cached_statement_lifetime", "300", _count),
                ("max_cacheable_statement_size", "15360", _count)),
}


def known_settings(driver: str) -> tuple[tuple[str, str], ...]:
    """The settings a driver takes, with their defaults (as the driver has them)."""
    if driver in NATIVE:
        return tuple((name, default) for name, default, _ in NATIVE[driver])
    team = registered(driver)
    found = team.shipped() if team is not None else shipped(driver)
    return found.spec.settings if found is not None else ()


def check_axis(axis: DriverAxis, option: str = "--driver-set") -> None:
    """A one-line UsageError for a name the driver does not take (listing those it does) or a value
    psycopg or asyncpg would refuse."""
    known = dict(known_settings(axis.driver))
    if axis.name not in known:
        listed = ", ".join(known) or ("none (its hello lists no \"settings\")" if registered(axis.driver) else "none")
        raise UsageError(f"{option}={axis.driver}:{axis.name}: {axis.driver} has no setting {axis.name!r}; "
                         f"its settings are: {listed}")
    for name, _, convert in NATIVE.get(axis.driver, ()):
        for value in axis.values if name == axis.name else ():
            try:
                convert(value)
            except ValueError as exc:
                raise UsageError.bad_value(option, f"{axis.driver}:{name}={value}", str(exc)) from None


def _same(driver: str, name: str, value: str, default: str) -> bool:
    convert = next((c for n, _, c in NATIVE.get(driver, ()) if n == name), None)
    if convert is not None:
        return bool(convert(value) == convert(default))
    return value.lower() == default.lower()


def cell_settings(driver: str, combination: tuple[Setting, ...]) -> tuple[Setting, ...]:
    """The settings a cell carries: those of `combination` that differ from the driver's defaults."""
    defaults = dict(known_settings(driver))
    return tuple((k, v) for k, v in combination if k not in defaults or not _same(driver, k, v, defaults[k]))


def default_of(driver: str, name: str) -> str | None:
    """A setting's default as the driver has it (None: not a setting of that driver)."""
    return dict(known_settings(driver)).get(name)


def native_values(driver: str, settings: tuple[Setting, ...]) -> dict[str, Any]:
    """What psycopg or asyncpg is given for a cell's settings (names to the driver's own values)."""
    converters = {name: convert for name, _, convert in NATIVE.get(driver, ())}
    return {k: converters[k](v) for k, v in settings}
