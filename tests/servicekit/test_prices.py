"""The one parser of ``--price FLAVOR_OR_MODEL=USD`` flags, shared by ``queuepilot report`` and the
economics rule generator."""

from __future__ import annotations

import pytest

from alerts.config import ConfigError
from alerts.economics import EconomicsConfig
from report import cli
from servicekit.prices import DEFAULT_PRICE_KEY, parse_prices


def test_a_flavor_price_wins_over_a_model_price_and_a_model_price_over_the_default() -> None:
    prices = parse_prices(["a100-80g=4", "NVIDIA H100 80GB HBM3=3", f"{DEFAULT_PRICE_KEY}=1"])
    assert prices.price("a100-80g", "NVIDIA H100 80GB HBM3") == 4.0
    assert prices.price("other", "NVIDIA H100 80GB HBM3") == 3.0
    assert prices.price("other", "other") == 1.0
    assert parse_prices(["h100=3"]).price("a100", "A100") is None
    assert not parse_prices([])


def test_a_later_price_for_the_same_key_wins_and_keys_may_hold_spaces() -> None:
    assert dict(parse_prices(["h100=3", " h100 = 5 "]).by_key) == {"h100": 5.0}


@pytest.mark.parametrize(("item", "says"), [
    ("h100", "expects FLAVOR_OR_MODEL=USD_PER_GPU_HOUR"),
    ("=3", "expects FLAVOR_OR_MODEL=USD_PER_GPU_HOUR"),
    ("h100=cheap", "must be a number"),
    ("h100=-1", "must not be negative"),
    ("h100=nan", "must be a finite number"),
    ("h100=inf", "must be a finite number"),
])
def test_a_bad_price_is_an_error_that_names_it(item: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_prices([item])
    with pytest.raises(ConfigError, match=says):  # the rule generator's own error kind
        EconomicsConfig().with_prices([item])
    assert cli.main(["--prometheus-url", "http://127.0.0.1:9", "--price", item]) == cli.EXIT_USAGE


def test_the_rule_generator_adds_prices_to_those_it_has_sorted_by_key() -> None:
    config = EconomicsConfig().with_prices(["m=3", "f=5"]).with_prices(["m=2", "*=1"])
    assert config.prices == (("*", 1.0), ("f", 5.0), ("m", 2.0))
