"""What a Claude model costs, per million tokens, so the loop's cost budget holds for every model.

Prices are Anthropic's published list prices in USD per million tokens (MTok), taken on
PRICES_TAKEN from the pricing page (docs/providers.md has the table). A model is priced by the
longest prefix of its name in MODEL_PRICES, so dated ids and aliases match their family
(claude-sonnet-4-5-20250929 -> claude-sonnet-4). A model that matches no prefix is priced at
FALLBACK_PRICE, the most expensive known price: an unknown model can over-spend the estimate,
never the budget. Cache writes are the 5-minute writes (the provider's `ephemeral` breakpoints):
1.25x the input price; cache reads 0.1x (0.05x for Sonnet 5.5 and Opus 5.5, 0.025x for Fable
5.1 and Mythos 5.1).
"""

from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings

MTOK = Decimal(1_000_000)
PRICES_TAKEN = "2026-11-26"


@dataclass(frozen=True)
class ModelPrice:
    input: Decimal
    output: Decimal
    cache_write: Decimal
    cache_read: Decimal


def _price(input: str, output: str, cache_write: str, cache_read: str) -> ModelPrice:
    return ModelPrice(Decimal(input), Decimal(output), Decimal(cache_write), Decimal(cache_read))


FABLE_5 = _price("10.00", "50.00", "12.50", "1.00")  # Fable 5 and Mythos 5
FABLE_5_1 = _price("10.00", "50.00", "12.50", "0.25")  # Fable 5.1 and Mythos 5.1
OPUS_5_5 = _price("4.00", "20.00", "5.00", "0.20")
SONNET_5 = _price("2.00", "10.00", "2.50", "0.20")
SONNET_5_5 = _price("2.00", "10.00", "2.50", "0.10")  # cache hits cut to 0.05x input on 2026-10-07
HAIKU_5_5 = _price("0.10", "0.50", "0.125", "0.01")  # prompts up to 100K tokens (ours are)
OPUS_4_0 = _price("15.00", "75.00", "18.75", "1.50")  # Opus 4 and 4.1 (and Opus 3)
OPUS_4_5 = _price("5.00", "25.00", "6.25", "0.50")  # Opus 4.5 and later
SONNET = _price("3.00", "15.00", "3.75", "0.30")
HAIKU_4_5 = _price("1.00", "5.00", "1.25", "0.10")
HAIKU_3_5 = _price("0.80", "4.00", "1.00", "0.08")
HAIKU_3 = _price("0.25", "1.25", "0.30", "0.03")

MODEL_PRICES: dict[str, ModelPrice] = {
    "claude-fable-5-1": FABLE_5_1,
    "claude-mythos-5-1": FABLE_5_1,
    "claude-fable-5": FABLE_5,
    "claude-mythos-5": FABLE_5,
    "claude-opus-5-5": OPUS_5_5,
    "claude-opus-5": OPUS_4_5,
    "claude-opus-4-8": OPUS_4_5,
    "claude-opus-4-7": OPUS_4_5,
    "claude-opus-4-6": OPUS_4_5,
    "claude-opus-4-5": OPUS_4_5,
    "claude-opus-4": OPUS_4_0,  # claude-opus-4-0, -4-1, -4-20250514
    "claude-sonnet-5-5": SONNET_5_5,
    "claude-sonnet-5": SONNET_5,
    "claude-sonnet-4": SONNET,  # 4, 4.5, 4.6 (prompts under 200K tokens: ours are)
    "claude-3-7-sonnet": SONNET,
    "claude-3-5-sonnet": SONNET,
    "claude-haiku-5-5": HAIKU_5_5,
    "claude-haiku-4": HAIKU_4_5,
    "claude-3-5-haiku": HAIKU_3_5,
    "claude-3-haiku": HAIKU_3,
    "claude-3-opus": OPUS_4_0,
}
# The most expensive price in the table, for a model it does not know.
FALLBACK_PRICE = max(MODEL_PRICES.values(), key=lambda p: (p.output, p.input, p.cache_write, p.cache_read))


def model_price(model: str) -> ModelPrice:
    """The price of `model`: its longest matching prefix in MODEL_PRICES, else FALLBACK_PRICE.
    A price setting (ANTHROPIC_PRICE_*_PER_MTOK) set by the operator replaces its part."""
    name = (model or "").strip().lower()
    matches = [prefix for prefix in MODEL_PRICES if name.startswith(prefix)]
    price = MODEL_PRICES[max(matches, key=len)] if matches else FALLBACK_PRICE
    overrides = {
        "input": settings.ANTHROPIC_PRICE_INPUT_PER_MTOK,
        "output": settings.ANTHROPIC_PRICE_OUTPUT_PER_MTOK,
        "cache_write": settings.ANTHROPIC_PRICE_CACHE_WRITE_PER_MTOK,
        "cache_read": settings.ANTHROPIC_PRICE_CACHE_READ_PER_MTOK,
    }
    return ModelPrice(
        **{part: price.__dict__[part] if value is None else Decimal(value) for part, value in overrides.items()}
    )


def usage_cost_usd(
    *, model: str, input_tokens: int, output_tokens: int, cache_creation_input_tokens: int, cache_read_input_tokens: int
) -> Decimal:
    """The cost in USD of one call's usage, exact (not rounded)."""
    price = model_price(model)
    return (
        input_tokens * price.input
        + output_tokens * price.output
        + cache_creation_input_tokens * price.cache_write
        + cache_read_input_tokens * price.cache_read
    ) / MTOK
