"""Claude through the official `anthropic` SDK (Messages API with tool use).

Quick retries are the SDK's own (`max_retries` on the client): it retries 408, 409, 429, 5xx
(including 529 overloaded), dropped connections and timeouts, honours `retry-after-ms` /
`retry-after`, and otherwise backs off exponentially with jitter. What is left once it gives up
becomes a ProviderError for the loop: transient when the SDK would have retried it, with the
wait the API asked for; the loop waits that out for a long outage (agent.loop).
"""

import copy
import functools
from decimal import Decimal

import anthropic
from anthropic.resources.messages import messages as sdk_messages
from django.conf import settings
from django.core import checks

from .base import ModelTurn, ProviderError, ToolCall, ToolSpec, Usage
from .pricing import usage_cost_usd

EPHEMERAL = {"type": "ephemeral"}


@functools.lru_cache(maxsize=8)
def _client(api_key: str, base_url: str | None, timeout: float, max_retries: int) -> anthropic.Anthropic:
    """One SDK client per setting, shared by every run of the process (the client is thread-safe).
    Building one loads the CA bundle into a new SSL context and a new connection pool: under a
    steady load that was a third of the agent worker's CPU (docs/performance.md), and a client
    per run also opened a new TLS connection to the provider for every ticket."""
    return anthropic.Anthropic(
        api_key=api_key,
        base_url=base_url,
        timeout=timeout,
        max_retries=max_retries,
        # The SDK's own span of each call nests under ours; never with content (unredacted).
        open_telemetry={"traces": {"content_mode": "metadata_only"}},
    )


class AnthropicProvider:
    name = "anthropic"

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        model: str | None = None,
        max_retries: int | None = None,
        timeout: float | None = None,
        cache_conversation: bool = True,
    ):
        api_key = api_key if api_key is not None else settings.ANTHROPIC_API_KEY
        self.model = model or settings.ANTHROPIC_MODEL
        self.max_retries = settings.ANTHROPIC_MAX_RETRIES if max_retries is None else max_retries
        self.cache_conversation = cache_conversation
        # Without a key the provider still builds, and every call fails permanently: the loop
        # then stops the run `failed` with this reason instead of the task crashing.
        self.client = None
        if api_key:
            self.client = _client(
                api_key,
                base_url if base_url is not None else settings.ANTHROPIC_BASE_URL,
                settings.ANTHROPIC_TIMEOUT_SECONDS if timeout is None else timeout,
                self.max_retries,
            )

    # -- the Provider interface -------------------------------------------------------------

    def complete(self, *, system: str, tools: list[ToolSpec], messages: list[dict], max_tokens: int) -> ModelTurn:
        if self.client is None:
            raise ProviderError("ANTHROPIC_API_KEY is not set: the anthropic provider cannot run.", transient=False)
        if max_tokens < 1:
            raise ProviderError(f"max_tokens must be at least 1 (got {max_tokens}).", transient=False)
        request = {
            "model": self.model,
            "max_tokens": int(max_tokens),
            "system": [{"type": "text", "text": system, "cache_control": EPHEMERAL}],
            "messages": self._messages(messages),
        }
        if tools:
            request["tools"] = tool_definitions(tools)
        message = self._create(request)
        return turn_from_message(message, default_model=self.model)

    def cost_usd(self, usage: Usage) -> Decimal:
        """Estimated cost in USD at this model's price per million tokens, exact (not rounded)."""
        return usage_cost_usd(
            model=self.model,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_creation_input_tokens=usage.cache_creation_input_tokens,
            cache_read_input_tokens=usage.cache_read_input_tokens,
        )

    # -- internals --------------------------------------------------------------------------

    def _messages(self, messages: list[dict]) -> list[dict]:
        """A copy of the transcript; with conversation caching, a cache breakpoint on the last
        block, so each turn reads the previous turns from the cache instead of paying for them
        again. The caller's list (the durable transcript) is never modified."""
        messages = copy.deepcopy(messages)
        for message in messages:  # at most 4 breakpoints per request: only ours count
            if isinstance(message.get("content"), list):
                for block in message["content"]:
                    if isinstance(block, dict):
                        block.pop("cache_control", None)
        if self.cache_conversation and messages:
            last = messages[-1]
            content = last.get("content")
            if isinstance(content, str):
                content = last["content"] = [{"type": "text", "text": content}]
            if content and isinstance(content[-1], dict) and content[-1].get("type") in CACHEABLE_BLOCKS:
                content[-1]["cache_control"] = EPHEMERAL
        return messages

    def _create(self, request: dict):
        """One call; the SDK has already retried what is worth retrying when an error gets here."""
        try:
            return self.client.messages.create(**request)
        except anthropic.APIStatusError as e:
            transient = is_transient_status(e.status_code, e.response.headers.get("x-should-retry"))
            message = describe(e)
            if transient:
                message += f" (gave up after {attempts_of(e.response.request)} attempts)"
            raise ProviderError(
                message, transient=transient, status_code=e.status_code, retry_after=retry_after_of(e.response)
            ) from e
        except anthropic.APIConnectionError as e:  # includes APITimeoutError
            raise ProviderError(
                f"anthropic: {type(e).__name__}: {e} (gave up after {attempts_of(e.request)} attempts)", transient=True
            ) from e
        except anthropic.AnthropicError as e:
            raise ProviderError(f"anthropic: {type(e).__name__}: {e}", transient=False) from e
        except ValueError as e:  # the SDK refuses some requests before sending them
            raise ProviderError(f"anthropic: {e}", transient=False) from e


CACHEABLE_BLOCKS = {"text", "tool_result", "tool_use", "image", "document"}


def tool_definitions(tools: list[ToolSpec]) -> list[dict]:
    """Tools as the API takes them; the breakpoint on the last one caches the whole tool list."""
    definitions = [{"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in tools]
    if definitions:
        definitions[-1]["cache_control"] = EPHEMERAL
    return definitions


def turn_from_message(message, *, default_model: str = "") -> ModelTurn:
    content: list[dict] = []
    tool_calls: list[ToolCall] = []
    texts: list[str] = []
    for block in message.content or []:
        if block.type == "text":
            content.append({"type": "text", "text": block.text})
            texts.append(block.text)
        elif block.type == "tool_use":
            tool_input = dict(block.input) if isinstance(block.input, dict) else {}
            content.append({"type": "tool_use", "id": block.id, "name": block.name, "input": tool_input})
            tool_calls.append(ToolCall(id=block.id, name=block.name, input=tool_input))
        else:
            # thinking and other blocks go back to the API unchanged in the next request
            content.append(block.model_dump(mode="json", exclude_none=True))
    return ModelTurn(
        content=content,
        tool_calls=tool_calls,
        text="\n".join(t for t in texts if t),
        stop_reason=message.stop_reason or "end_turn",
        usage=usage_from(getattr(message, "usage", None)),
        model=message.model or default_model,
    )


def usage_from(usage) -> Usage:
    if usage is None:
        return Usage()
    return Usage(
        input_tokens=getattr(usage, "input_tokens", None) or 0,
        output_tokens=getattr(usage, "output_tokens", None) or 0,
        cache_creation_input_tokens=getattr(usage, "cache_creation_input_tokens", None) or 0,
        cache_read_input_tokens=getattr(usage, "cache_read_input_tokens", None) or 0,
    )


def is_transient_status(status_code: int, should_retry: str | None = None) -> bool:
    """What the SDK retries (its `_should_retry`): the server's x-should-retry, else 408, 409,
    429 and 5xx."""
    if should_retry == "true":
        return True
    if should_retry == "false":
        return False
    return status_code in (408, 409, 429) or status_code >= 500


def retry_after_of(response) -> float | None:
    """The wait the API asked for, in seconds: `retry-after-ms`, else `retry-after` (seconds;
    Anthropic sends no HTTP dates). None when it said nothing usable."""
    headers = getattr(response, "headers", None) or {}
    for name, scale in (("retry-after-ms", 1000), ("retry-after", 1)):
        try:
            value = float(headers.get(name, "")) / scale
        except ValueError:
            continue
        if value >= 0:
            return value
    return None


def attempts_of(request) -> int:
    """How many attempts the SDK made: it numbers each retry in the request's headers."""
    try:
        return int(request.headers.get("x-stainless-retry-count", "0")) + 1
    except (AttributeError, RuntimeError, ValueError):
        return 1


def describe(e: "anthropic.APIStatusError") -> str:
    kind = e.type or "error"
    message = e.api_message or str(e)
    request_id = f" (request {e.request_id})" if e.request_id else ""
    return f"anthropic {e.status_code} {kind}: {message}{request_id}"


def model_retirement_problems() -> list[str]:
    """The configured models the SDK lists as retired or retiring (with the date it gives): after
    that date every call fails, and every ticket with it. The SDK keeps that list beside its
    Messages resource; an SDK without it checks nothing."""
    retiring = getattr(sdk_messages, "DEPRECATED_MODELS", {})
    configured = {}
    if settings.AGENT_PROVIDER == "anthropic":
        configured["ANTHROPIC_MODEL"] = settings.ANTHROPIC_MODEL
    # The reply's second check calls Anthropic whatever the agent's provider (agent.reply_check).
    if settings.REPLY_MODEL_CHECK and settings.ANTHROPIC_API_KEY:
        setting = "REPLY_MODEL_CHECK_MODEL" if settings.REPLY_MODEL_CHECK_MODEL else "ANTHROPIC_MODEL"
        configured.setdefault(setting, settings.REPLY_MODEL_CHECK_MODEL or settings.ANTHROPIC_MODEL)
    return [
        f"{setting}={model} reaches its end of life on {retiring[model]} (Anthropic's deprecation list in the SDK): "
        "after that every model call fails. Choose a current model (docs/providers.md)."
        for setting, model in configured.items()
        if model in retiring
    ]


def model_retirement_check(app_configs, **kwargs):
    """The system check (registered by the app's ready()): a warning per retiring model."""
    return [checks.Warning(problem, id="refundagent.W002") for problem in model_retirement_problems()]
