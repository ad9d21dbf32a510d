"""Forms of the support web UI and the admin's proposal page. They only parse input;
`refundagent.services` decides."""

from django import forms

from ledger.exceptions import DomainError
from ledger.money import CENT, MoneyFormField

from .labels import label
from .models import Ticket
from .services import MAX_REPLY_LENGTH, ticket_refund_propose


class _ItemsAndDestination:
    """The cleaning of the `items` (comma separated) and `refund_to` fields both ticket forms have."""

    def clean_items(self):
        return [part.strip() for part in self.cleaned_data["items"].split(",") if part.strip()]

    def clean_refund_to(self):
        return self.cleaned_data["refund_to"].strip()


class TextareaField(forms.CharField):
    """Text from a textarea, with its line breaks as LF. Browsers count a line break as one
    character against `maxlength` but post it as CRLF: counted as posted, a text that fits the
    box would be refused for being longer than the box allows."""

    widget = forms.Textarea

    def to_python(self, value):
        return super().to_python(value).replace("\r\n", "\n")


# The longest customer id a form takes (the shop's id; ledger.models.Customer.external_id).
CUSTOMER_ID_MAX = 100


class CustomerQueryForm(forms.Form):
    """`?customer=`: whose payment methods the new-ticket form's picker loads."""

    customer = forms.CharField(max_length=CUSTOMER_ID_MAX, label="Customer")

    def clean_customer(self):
        return self.cleaned_data["customer"].strip()


class TicketForm(_ItemsAndDestination, forms.Form):
    order = forms.CharField(
        max_length=100,
        label="Order",
        required=False,
        widget=forms.TextInput(attrs={"placeholder": "ORD-5001", "autofocus": True}),
        help_text="Blank: the agent finds the order among the customer's orders.",
    )
    customer = forms.CharField(
        max_length=CUSTOMER_ID_MAX, label="Customer", widget=forms.TextInput(attrs={"placeholder": "CUST-1001"})
    )
    message = forms.CharField(
        label="Customer's message",
        widget=forms.Textarea(attrs={"rows": 6, "placeholder": "Paste what the customer wrote."}),
        help_text="Untrusted text: the agent reads it, the policy gate decides.",
    )
    requested_amount = MoneyFormField(
        label="Requested amount",
        required=False,
        error_messages={"negative": "The requested amount must be positive."},
        widget=forms.TextInput(attrs={"placeholder": "200.00", "inputmode": "decimal"}),
        help_text="What the customer asks for, in the order's currency.",
    )
    items = forms.CharField(
        label="Items",
        required=False,
        widget=forms.TextInput(attrs={"placeholder": "ITEM-1, ITEM-2"}),
        help_text="Comma separated: the items the request is about, once per unit (ITEM-6, ITEM-6 for two units "
        "of ITEM-6).",
    )

    # Replaced in __init__ by the picker of the typed customer's own payment methods.
    refund_to = forms.ChoiceField(label="Refund to", required=False)

    def __init__(self, *args, methods=None, customer: str = "", **kwargs):
        """`methods`: the typed customer's own payment methods (`selectors.customer_methods`);
        None or empty (no customer typed yet, or none of the tenant's by that id: the same
        answer) leaves only the original payment method to pick. `customer`: the id typed, for
        the error of a method that is not theirs."""
        super().__init__(*args, **kwargs)
        self.fields["refund_to"] = refund_to_picker(
            methods or [],
            blank="The original payment method (the order's own payment)",
            help_text="Where the money goes: the order's own payment, or one of the customer's payment methods.",
            customer=customer,
        )

    def clean_order(self):
        return self.cleaned_data["order"].strip()

    def clean_customer(self):
        return self.cleaned_data["customer"].strip()

    def add_domain_error(self, error: DomainError) -> None:
        """Show a service's refusal next to the field it is about (else above the form)."""
        self.add_error(_field_for(error, self.cleaned_data), error.message)


def _field_for(error: DomainError, data: dict) -> str | None:
    code = error.code
    if code == "customer_mismatch":
        return "customer"
    if code.startswith("message"):
        return "message"
    if code in {"amount_not_positive", "amount_precision", "bad_amount", "float_amount"}:
        return "requested_amount"
    if code in {"item_not_on_order", "too_many_items", "items_need_order", "items_exceed_quantity"}:
        return "items"
    if code == "unknown_payment_method":
        return "refund_to"
    if code == "not_found":
        # "Order X not found." / "Customer X not found." (ledger.selectors)
        if error.message.startswith("Order"):
            return "order"
        if error.message.startswith("Customer"):
            return "customer"
    return None


class TicketFilterForm(forms.Form):
    # The badges' words (the one label table), not the model's codes.
    status = forms.ChoiceField(
        required=False,
        choices=[("", "All statuses"), *((code, label(code, "ticket_status")) for code in Ticket.Status.values)],
    )
    q = forms.CharField(
        required=False,
        max_length=100,
        label="Search",
        widget=forms.TextInput(attrs={"placeholder": "Order or customer", "type": "search"}),
    )


class NoteForm(forms.Form):
    note = forms.CharField(
        required=False, max_length=500, widget=forms.TextInput(attrs={"placeholder": "Note (optional)"})
    )


class EscalateForm(NoteForm):
    """Escalating. While finance has a request of the ticket pending, escalating withdraws it:
    the person names that request (`withdraw`, its id, from the page they saw) and says why."""

    withdraw = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)

    def clean_note(self):
        return self.cleaned_data["note"].strip()

    def check_pending(self, pending) -> bool:
        """With `pending` (the ticket's request waiting for finance), the confirmation of exactly
        that request and a note are needed; False, with the form error, when they are missing."""
        if pending is None:
            return True
        if self.cleaned_data.get("withdraw") == pending.pk and self.cleaned_data.get("note"):
            return True
        self.add_error(
            None,
            f"Escalating withdraws finance's pending request #{pending.pk} for {pending.amount} {pending.currency}: "
            "tick the box to confirm and say why in the note.",
        )
        return False


class CloseForm(forms.Form):
    """Closing a ticket: an internal note (to the trace) and, optionally, the reply to send."""

    note = forms.CharField(
        required=False, max_length=500, widget=forms.TextInput(attrs={"placeholder": "Note (optional)"})
    )
    reply = TextareaField(
        required=False,
        max_length=MAX_REPLY_LENGTH,
        label="Reply to the customer",
        widget=forms.Textarea(
            attrs={"rows": 3, "placeholder": "What you tell the customer (becomes the ticket's reply)."}
        ),
    )


def payment_method_label(method) -> str:
    """A payment method as a person recognises it: "Card visa ****4242 (card_4242)"."""
    if method.kind == "gift_card":
        balance = f", balance {method.balance}" if method.balance is not None else ""
        return f"Gift card{balance} ({method.external_id})"
    card = " ".join(part for part in (method.brand, f"****{method.last4}" if method.last4 else "") if part)
    return f"{method.get_kind_display()} {card} ({method.external_id})".replace("  ", " ")


def refund_to_picker(methods, *, blank: str, help_text: str, customer: str = "") -> forms.ChoiceField:
    """ "Refund to" as a picker of the customer's own payment methods, `blank` (the default)
    first: the one picker of the new-ticket form and the proposal forms. A value that is not one
    of them is an error at the field; the service checks again when it decides."""
    whose = f"customer {customer}" if customer else "the customer"
    return forms.ChoiceField(
        label="Refund to",
        required=False,
        choices=[("", blank)] + [(method.external_id, payment_method_label(method)) for method in methods],
        help_text=help_text,
        # A ValidationError formats its message with %: a typed customer id's own % stays text.
        error_messages={
            "invalid_choice": f"%(value)s is not a payment method of {whose.replace('%', '%%')}: pick one from the list."
        },
    )


class ProposalForm(_ItemsAndDestination, forms.Form):
    """A person's refund proposal on an escalated, failed or payment-failed ticket: the support
    app's ticket page and the admin's proposal page post the same form to the same service
    (`ticket_refund_propose`). The amount takes only the strict money syntax: "1e30", "１２０"
    (full-width digits) or "120.001" are form errors, never a number the service sees."""

    order = forms.ChoiceField(
        label="Order",
        help_text="The ticket names no order: which of the customer's orders the refund is for.",
    )
    amount = MoneyFormField(
        label="Amount",
        min_value=CENT,
        widget=forms.TextInput(attrs={"placeholder": "50.00", "inputmode": "decimal"}),
    )
    items = forms.CharField(
        label="Items",
        required=False,
        widget=forms.TextInput(attrs={"placeholder": "ITEM-1, ITEM-2"}),
        help_text="Comma separated; blank: the ticket's items, or the order.",
    )
    refund_to = forms.CharField(
        label="Refund to",
        required=False,
        max_length=100,
        widget=forms.TextInput(attrs={"placeholder": "blank: the ticket's choice"}),
        help_text="One of the customer's payment methods; blank: the ticket's choice, else the original method.",
    )
    reason = TextareaField(
        label="Reason",
        required=False,
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "Why this refund."}),
    )
    exception = forms.BooleanField(
        label="Policy exception",
        required=False,
        help_text="Outside the policy's waivable rules (window, order status): needs a reason and two finance "
        "approvers, never you.",
    )

    def __init__(self, *args, orders=None, methods=None, **kwargs):
        """`orders`: the customer's orders to pick from (`ticket_customer_orders`), on a ticket
        that names none; otherwise the form has no order field. `methods`: the customer's own
        payment methods, which make "refund to" a picker instead of a typed id."""
        super().__init__(*args, **kwargs)
        if methods is not None:
            self.fields["refund_to"] = refund_to_picker(
                methods,
                blank="The ticket's choice, else the original payment method",
                help_text="One of the customer's own payment methods.",
            )
        if orders is None:
            del self.fields["order"]
        else:
            self.fields["order"].choices = [
                ("", "Pick an order"),
                *(
                    (
                        row["order"].external_id,
                        f"{row['order'].external_id} · {row['refundable']} {row['order'].currency} refundable"
                        f" · {row['order'].status}",
                    )
                    for row in orders
                ),
            ]

    def propose(self, *, ticket: Ticket, user):
        """The valid proposal, through `ticket_refund_propose` (the support page's and the admin's
        one call; the service raises DomainError for what it refuses)."""
        data = self.cleaned_data
        return ticket_refund_propose(
            ticket=ticket,
            user=user,
            amount=data["amount"],
            reason=data["reason"],
            exception=data["exception"],
            items=data["items"] or None,
            refund_to=data["refund_to"],
            order=data.get("order") or None,
        )

    def add_domain_error(self, error: DomainError) -> None:
        """Show the service's refusal next to the field it is about (else above the form)."""
        field = PROPOSAL_ERROR_FIELDS.get(error.code)
        self.add_error(field if field in self.fields else None, error.message)


# The proposal service's refusals that are about one field (approvals.services.proposals,
# refundagent.services.ticket_refund_propose); the gate's policy refusals are about the whole.
PROPOSAL_ERROR_FIELDS = {
    "amount_not_positive": "amount",
    "bad_amount": "amount",
    "float_amount": "amount",
    "amount_above_refundable": "amount",
    "currency_mismatch": "amount",
    "unknown_payment_method": "refund_to",
    "foreign_destination": "refund_to",
    "exception_reason_required": "reason",
    "reason_too_long": "reason",
    "items_not_refundable": "items",
    "order_required": "order",
    "order_not_customers": "order",
    "order_mismatch": "order",
}


class QueueFilterForm(forms.Form):
    reason = forms.ChoiceField(
        required=False,
        choices=[
            ("", "All reasons"),
            (Ticket.Status.ESCALATED, "Escalated"),
            (Ticket.Status.FAILED, "Failed"),
            (Ticket.Status.PAYMENT_FAILED, "Payment failed"),
        ],
    )
    owner = forms.ChoiceField(required=False, choices=[("", "Anyone"), ("me", "Mine"), ("none", "Nobody yet")])
