"""Prices per GPU-hour, as the ``--price FLAVOR_OR_MODEL=USD`` flags of ``queuepilot report`` and
``python -m alerts.economics`` give them: a Kueue flavor or a GPU model name (``*`` for every other GPU)
to US dollars per GPU-hour. A flavor price wins over a model price, a model price over ``*``."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

DEFAULT_PRICE_KEY = "*"  # the price of GPUs no flavor or model price names


@dataclass(frozen=True)
class Prices:
    """USD per GPU-hour by Kueue flavor or GPU model name; ``*`` prices every other GPU."""

    by_key: Mapping[str, float] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.by_key)

    def price(self, flavor: str, model: str) -> float | None:
        for key in (flavor, model, DEFAULT_PRICE_KEY):
            if key and key in self.by_key:
                return self.by_key[key]
        return None


def parse_prices(items: Iterable[str]) -> Prices:
    """``KEY=USD`` items (a later item for the same key wins); ValueError naming the bad item."""
    out: dict[str, float] = {}
    for item in items:
        key, sep, value = (s.strip() for s in item.rpartition("="))
        if not sep or not key:
            raise ValueError(f"--price expects FLAVOR_OR_MODEL=USD_PER_GPU_HOUR, got {item!r}")
        try:
            price = float(value)
        except ValueError:
            raise ValueError(f"the price of {key!r} must be a number (USD per GPU-hour), got {value!r}") from None
        if not math.isfinite(price):
            raise ValueError(f"the price of {key!r} must be a finite number (USD per GPU-hour), got {value!r}")
        if price < 0:
            raise ValueError(f"the price of {key!r} must not be negative, got {price}")
        out[key] = price
    return Prices(out)
