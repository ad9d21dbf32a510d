"""A provider that plays a fixed script: tests and evals use it to play a misbehaving model.

A script is a list of turns, as Python objects or JSON data:
    {"tool": "refunds_issue_refund", "input": {"order_id": "ORD-5001", "amount": "5000.00"}}
    {"tools": [{"tool": ..., "input": ...}, ...]}       several calls in one turn
    {"text": "I'm done."}                               ends the turn without a call
    {"error": "overloaded", "transient": true, "status_code": 529}   the provider fails
    {"crash": true}                                     the process "dies" here (raises ScriptCrash)
Any turn may carry "sleep": seconds (a slow model) and "usage": {"input_tokens": .., ...}.
Tool names may be given with dots (refunds.issue_refund); they are sent API-safe.

The provider is stateless: the turn it plays is the number of assistant messages already in
the transcript, so a resumed run (another process) continues the script where it stopped.
With `repeat=True` the last turn is played forever (a looping model).
"""

import json
import time
from decimal import Decimal

from .base import ModelTurn, ProviderError, ToolCall, ToolSpec, Usage


class ScriptCrash(BaseException):
    """Simulates the worker dying in the middle of a model call: not an Exception, so nothing in
    the loop catches it and the run is left as a killed worker leaves it."""


class ScriptedProvider:
    name = "scripted"

    def __init__(
        self,
        turns: list,
        *,
        repeat: bool = False,
        model: str = "scripted",
        usage: dict | None = None,
        usd_per_token: Decimal | str = "0",
    ):
        self.turns = list(turns)
        self.repeat = repeat
        self.model = model
        self.default_usage = {"input_tokens": 100, "output_tokens": 20, **(usage or {})}
        self.usd_per_token = Decimal(str(usd_per_token))
        self.calls = 0
        self.max_tokens_seen: list[int] = []

    @classmethod
    def from_json(cls, data) -> "ScriptedProvider":
        """A script stored as data: a list of turns, or {"turns": [...], "repeat": bool, ...}."""
        if isinstance(data, (str, bytes)):
            data = json.loads(data)
        if isinstance(data, list):
            return cls(data)
        options = {k: data[k] for k in ("repeat", "model", "usage", "usd_per_token") if k in data}
        return cls(data.get("turns", []), **options)

    def complete(self, *, system: str, tools: list[ToolSpec], messages: list[dict], max_tokens: int) -> ModelTurn:
        self.calls += 1
        self.max_tokens_seen.append(max_tokens)
        index = sum(1 for m in messages if m.get("role") == "assistant")
        if index < len(self.turns):
            turn = self.turns[index]
        elif self.repeat and self.turns:
            turn = self.turns[-1]
        else:
            turn = {"text": "(the script has ended)"}
        if isinstance(turn, ModelTurn):
            return turn
        if turn.get("sleep"):
            time.sleep(float(turn["sleep"]))
        if turn.get("crash"):
            raise ScriptCrash(f"scripted crash at turn {index}")
        if "error" in turn:
            raise ProviderError(
                str(turn["error"]), transient=bool(turn.get("transient")), status_code=turn.get("status_code")
            )
        usage = Usage(**{**self.default_usage, **turn.get("usage", {})})
        calls = turn.get("tools") or ([turn] if "tool" in turn else [])
        content: list[dict] = []
        if turn.get("text"):
            content.append({"type": "text", "text": turn["text"]})
        tool_calls = []
        for k, call in enumerate(calls):
            call_id = f"toolu_s{index:03d}_{k}"
            name = str(call["tool"]).replace(".", "_")
            arguments = call.get("input", {})
            content.append({"type": "tool_use", "id": call_id, "name": name, "input": arguments})
            tool_calls.append(ToolCall(id=call_id, name=name, input=arguments))
        return ModelTurn(
            content=content,
            tool_calls=tool_calls,
            text=turn.get("text", ""),
            stop_reason="tool_use" if tool_calls else "end_turn",
            usage=usage,
            model=self.model,
        )

    def cost_usd(self, usage: Usage) -> Decimal:
        return self.usd_per_token * usage.total
