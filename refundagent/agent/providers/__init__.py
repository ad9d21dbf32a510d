"""The one module that owns the LLM providers. The loop asks `provider_get()` for one."""

import os

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from .base import Provider


def provider_get(name: str | None = None) -> Provider:
    """settings.AGENT_PROVIDER: "offline" (the embedded default) or "anthropic".

    "scripted" plays the JSON script in the environment variable AGENT_SCRIPT (tests and evals
    that run a misbehaving model in a real worker). AGENT_OFFLINE_THINK_SECONDS makes the
    offline planner pause before each turn (simulated model latency for tests/benchmarks)."""
    name = (name or settings.AGENT_PROVIDER or "offline").strip().lower()
    if name == "offline":
        from .offline import OfflineProvider

        return OfflineProvider(think_seconds=float(os.getenv("AGENT_OFFLINE_THINK_SECONDS", "0") or 0))
    if name == "anthropic":
        from .anthropic import AnthropicProvider

        return AnthropicProvider()
    if name == "scripted":
        from .scripted import ScriptedProvider

        script = os.getenv("AGENT_SCRIPT")
        if not script:
            raise ImproperlyConfigured("AGENT_PROVIDER=scripted needs the script in AGENT_SCRIPT (JSON).")
        return ScriptedProvider.from_json(script)
    raise ImproperlyConfigured(f"Unknown AGENT_PROVIDER {name!r}: use 'offline' or 'anthropic'.")
