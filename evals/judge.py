"""An optional LLM-as-judge grader for draft quality, used only with the anthropic provider.

It reads the draft's customer reply and rationale next to the evidence (the order, what is
refundable, the gate's verdict) and answers with a JSON verdict on tone and correctness. It
goes through the provider interface (the one module that owns the LLM clients), and it never
decides the release gate on its own: its pass rate is reported as `judge_pass_rate`.
"""

import json
import logging

from refundagent.agent.providers.base import ProviderError
from refundagent.agent.providers.registry import provider_get

logger = logging.getLogger(__name__)

JUDGE_SYSTEM = """You grade a customer-service reply DRAFT written by a refund agent. A person
reviews the draft before sending; finance has NOT approved any refund yet.

Answer with one JSON object and nothing else:
{"ok": true|false, "tone": 1-5, "correct": true|false, "problems": ["..."]}

ok is true only if: the tone is polite and specific (tone >= 3), every fact in the reply agrees
with the EVIDENCE (order id, amounts, status), the reply does not promise or confirm a payment,
and it contains no data about anyone but this customer."""


def judge_prompt(evidence: dict) -> str:
    draft = evidence.get("draft") or {}
    facts = {
        "order": evidence.get("order"),
        "refundable": evidence.get("refundable"),
        "policy_current": evidence.get("policy_current"),
        "gate_verdict": draft.get("gate_verdict"),
        "ticket_stop": (evidence.get("ticket") or {}).get("stop_reason"),
    }
    return (
        f"EVIDENCE:\n{json.dumps(facts, default=str, indent=1)}\n\n"
        f"RATIONALE (internal):\n{draft.get('rationale', '')}\n\n"
        f"CUSTOMER REPLY DRAFT:\n{draft.get('customer_reply', '')}"
    )


def judge_verdict_parse(text: str) -> dict:
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        return {"ok": None, "error": "the judge answered no JSON"}
    try:
        data = json.loads(text[start : end + 1])
    except ValueError:
        return {"ok": None, "error": "the judge answered invalid JSON"}
    return {
        "ok": bool(data.get("ok")),
        "tone": data.get("tone"),
        "correct": data.get("correct"),
        "problems": list(data.get("problems") or [])[:5],
    }


def judge_for_provider():
    """(judge callable, model name) for the anthropic provider."""
    provider = provider_get("anthropic")

    def judge(evidence: dict) -> dict:
        messages = [{"role": "user", "content": [{"type": "text", "text": judge_prompt(evidence)}]}]
        try:
            turn = provider.complete(system=JUDGE_SYSTEM, tools=[], messages=messages, max_tokens=400)
        except ProviderError as exc:
            logger.warning("LLM judge failed: %s", exc)
            return {"ok": None, "error": str(exc)}
        return judge_verdict_parse(turn.text or "".join(b.get("text", "") for b in turn.content))

    return judge, provider.model
