"""Which provider runs the agent: `provider_get()` picks one from settings (the loop asks here)."""

import os

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from .anthropic import AnthropicProvider
from .base import Provider
from .offline import OfflineProvider
from .scripted import ScriptedProvider


def provider_get(name: str | None = None) -> Provider:
    """settings.AGENT_PROVIDER: "offline" (the embedded default) or "anthropic".

    "scripted" plays the JSON script in the environment variable AGENT_SCRIPT (tests and evals
    that run a misbehaving model in a real worker). AGENT_OFFLINE_THINK_SECONDS makes the
    offline planner pause before each turn (simulated model latency for tests/benchmarks)."""
    name = (name or settings.AGENT_PROVIDER or "offline").strip().lower()
    if name == "offline":
        return OfflineProvider(think_seconds=float(os.getenv("AGENT_OFFLINE_THINK_SECONDS", "0") or 0))
    if name == "anthropic":
        return AnthropicProvider()
    if name == "scripted":
        script = os.getenv("AGENT_SCRIPT")
        if not script:
            raise ImproperlyConfigured("AGENT_PROVIDER=scripted needs the script in AGENT_SCRIPT (JSON).")
        return ScriptedProvider.from_json(script)
    raise ImproperlyConfigured(f"Unknown AGENT_PROVIDER {name!r}: use 'offline' or 'anthropic'.")
