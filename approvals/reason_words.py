"""The codes a gate reason speaks of, in words. A reason is the sentence a person reads on the
ticket page, the queue and the review page; the code itself stays on the verdict (`codes`),
where tests, replays and evals match it. The label table (refundagent/labels.py) is a layer
above and names codes as labels; these are the words inside this layer's sentences."""

# What the agent asked for instead of a refund, as a sentence.
RECOMMENDATION_SENTENCES = {
    "escalate": "The agent asks a person to decide.",
    "deny": "The agent recommends refusing the refund.",
    "request_info": "The agent asks for more information from the customer.",
}

# Where a refund goes (approvals.gate.refund_destination_of; the policy's allowed destinations).
DESTINATION_WORDS = {
    "original": "the original payment method",
    "gift_card": "a gift card",
    "other": "another payment method",
}

# A payment method's kind (ledger.models.PaymentMethod.Kind).
METHOD_KIND_WORDS = {"card": "card", "paypal": "PayPal account", "gift_card": "gift card"}

# What the gate answers (approvals.gate.Outcome), after "the policy gate now ...".
GATE_OUTCOME_WORDS = {
    "approval_required": "asks finance to approve",
    "escalated": "hands it to a person",
    "denied": "refuses it",
}


def _humanised(code) -> str:
    """A code without words of its own, never raw: "store_credit" -> "store credit"."""
    return str(code).replace("_", " ")


def recommendation_sentence(recommendation) -> str:
    return RECOMMENDATION_SENTENCES.get(
        recommendation, f"The agent does not recommend a refund ({_humanised(recommendation)})."
    )


def destination_words(destination) -> str:
    return DESTINATION_WORDS.get(destination, _humanised(destination))


def destinations_words(destinations) -> str:
    """The policy's allowed destinations as a list in words ("none" when empty)."""
    return ", ".join(destination_words(destination) for destination in destinations) or "none"


def method_kind_words(kind) -> str:
    return METHOD_KIND_WORDS.get(kind, _humanised(kind))


def gate_outcome_words(outcome) -> str:
    return GATE_OUTCOME_WORDS.get(outcome, f"answers {_humanised(outcome)}")
