"""The one interface every LLM provider implements. The loop talks only to this.

Messages are kept in the Anthropic Messages format (role + content blocks: text, tool_use,
tool_result), which is also the durable transcript stored on AgentRun.messages.
"""

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Protocol


@dataclass(frozen=True)
class ToolSpec:
    name: str  # the API-safe name, e.g. orders_lookup_order (no dots allowed by the API)
    capability: str  # the registry name, e.g. orders.lookup_order
    description: str
    input_schema: dict


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    input: dict


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens


@dataclass
class ModelTurn:
    """One assistant turn: its content blocks (to append to the transcript) and its tool calls."""

    content: list[dict]
    tool_calls: list[ToolCall] = field(default_factory=list)
    text: str = ""
    stop_reason: str = "end_turn"
    usage: Usage = field(default_factory=Usage)
    model: str = ""


class ProviderError(Exception):
    """A provider call failed. A `transient` one (rate limited, overloaded, timeout, 5xx) is
    waited out by the loop, for AGENT_PROVIDER_OUTAGE_SECONDS at most; any other stops the run
    `failed`."""

    def __init__(
        self,
        message: str,
        *,
        transient: bool = False,
        status_code: int | None = None,
        retry_after: float | None = None,
    ):
        super().__init__(message)
        self.transient = transient
        self.status_code = status_code
        # Seconds the provider asked us to wait (its retry-after), if it said.
        self.retry_after = retry_after


class Provider(Protocol):
    name: str
    model: str

    def complete(self, *, system: str, tools: list[ToolSpec], messages: list[dict], max_tokens: int) -> ModelTurn: ...

    def cost_usd(self, usage: Usage) -> Decimal: ...
