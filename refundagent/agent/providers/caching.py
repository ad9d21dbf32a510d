"""Prompt caching: the cacheable prefix (tool definitions and system prompt, one breakpoint after
each) must be at least a model's minimum cacheable length, or the API caches nothing and says
nothing. A Django system check (refundagent.apps) warns at start when the configured model's
minimum is above the prefix.

The prefix's length is an estimate: four characters per token, the estimate the offline
provider reports too. No Claude tokenizer ships as a package, and asking the API
(`messages.count_tokens`) at start would need the key and the network; the estimate is good to
about 15% on English and JSON, and a prefix within 15% of a minimum is warned about as well.

MINIMUM_CACHEABLE_TOKENS is from Anthropic's prompt-caching documentation, taken on
MINIMUMS_TAKEN (docs/providers.md). Sources disagreed for some models (Sonnet 4.6: 1,024 in one
version of the documentation, 2,048 in another and in observed behaviour; Opus 4.7: 2,048 or
4,096): the higher one is kept, since a minimum taken too low hides a cache that is off. A
model the table does not know is held to the highest minimum.
"""

import json

from django.conf import settings
from django.core import checks

from ..prompts import SYSTEM_PROMPT
from ..tools import CREATE_DRAFT, LIST_CUSTOMER_ORDERS, LOOKUP_ORDER, PAYMENT_SUMMARY, POLICY_RETRIEVE, TOOL_DEFS
from .anthropic import tool_definitions

MINIMUMS_TAKEN = "2026-11-26"
CHARS_PER_TOKEN = 4
# How close to a minimum the estimate may come before it is not trusted to be above it.
ESTIMATE_MARGIN = 0.15

MINIMUM_CACHEABLE_TOKENS: dict[str, int] = {
    "claude-fable-5": 512,  # and 5.1
    "claude-mythos-5": 512,
    "claude-opus-5-5": 512,
    "claude-opus-5": 512,
    "claude-opus-4-8": 1024,
    "claude-opus-4-7": 4096,
    "claude-opus-4-6": 4096,
    "claude-opus-4-5": 4096,
    "claude-opus-4": 1024,  # 4 and 4.1
    "claude-sonnet-5": 1024,  # and 5.5
    "claude-sonnet-4-6": 2048,
    "claude-sonnet-4": 1024,  # 4 and 4.5
    "claude-3-7-sonnet": 1024,
    "claude-3-5-sonnet": 1024,
    "claude-haiku-5": 4096,
    "claude-haiku-4": 4096,
    "claude-3-5-haiku": 2048,
    "claude-3-haiku": 2048,
}
UNKNOWN_MODEL_MINIMUM = max(MINIMUM_CACHEABLE_TOKENS.values())


def tokens_estimate(text: str) -> int:
    """An estimate of how many tokens `text` is (see the module docstring)."""
    return len(text) // CHARS_PER_TOKEN


def minimum_cacheable_tokens(model: str) -> int:
    """The model's minimum cacheable prefix: its longest matching name prefix in the table."""
    name = (model or "").strip().lower()
    matches = [prefix for prefix in MINIMUM_CACHEABLE_TOKENS if name.startswith(prefix)]
    return MINIMUM_CACHEABLE_TOKENS[max(matches, key=len)] if matches else UNKNOWN_MODEL_MINIMUM


def cacheable_prefix_tokens(*, customer_level: bool = False) -> int:
    """The estimated length of the prefix every run sends first: the tool definitions as the
    API gets them, then the system prompt (the order the API caches them in)."""
    # The tools an order ticket's run is offered with the registry as seeded (the shortest prefix).
    offered = [LOOKUP_ORDER, PAYMENT_SUMMARY, POLICY_RETRIEVE, CREATE_DRAFT]
    if customer_level:
        offered.append(LIST_CUSTOMER_ORDERS)
    tools = tool_definitions([TOOL_DEFS[name].spec() for name in TOOL_DEFS if name in offered])
    return tokens_estimate(json.dumps(tools)) + tokens_estimate(SYSTEM_PROMPT)


def prompt_cache_problems() -> list[str]:
    """Why the configured Anthropic model would not cache the prefix, if it would not."""
    if settings.AGENT_PROVIDER != "anthropic":
        return []
    model = settings.ANTHROPIC_MODEL
    minimum = minimum_cacheable_tokens(model)
    prefix = cacheable_prefix_tokens()
    if prefix >= minimum * (1 + ESTIMATE_MARGIN):
        return []
    return [
        f"The cacheable prompt prefix (tool definitions and system prompt, about {prefix} tokens by "
        f"estimate) is not safely above {model}'s minimum cacheable length ({minimum} tokens): "
        "prompt caching may be off, and every turn pays the whole prefix at the input price."
    ]


def prompt_cache_check(app_configs, **kwargs):
    """The system check (registered by the app's ready()): a warning per problem."""
    return [checks.Warning(problem, id="refundagent.W001") for problem in prompt_cache_problems()]
