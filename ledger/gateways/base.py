"""What every payment gateway offers the ledger. The ledger talks to providers only through this."""

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal


@dataclass(frozen=True)
class RefundRequest:
    payment_ref: str  # pi_… or ch_…
    amount: Decimal
    currency: str
    idempotency_key: str
    metadata: dict[str, str]
    account: str = ""  # a connected account; blank: the platform's own


@dataclass(frozen=True)
class ProviderRefund:
    """A refund as the provider knows it. `status` is already a ledger status
    (pending / succeeded / failed / canceled)."""

    provider_ref: str
    status: str
    amount: Decimal
    currency: str
    payment_ref: str = ""  # the PaymentIntent, else the Charge
    charge: str = ""
    reason: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    created: datetime | None = None
    account: str = ""

    @classmethod
    def refused(cls, request: "RefundRequest", reason: str, *, account: str = "") -> "ProviderRefund":
        """The provider's refusal of `request` (no refund made there): failed, for the asked amount."""
        return cls(
            provider_ref="",
            status="failed",
            amount=request.amount,
            currency=request.currency,
            payment_ref=request.payment_ref,
            reason=reason,
            account=account,
        )

    @property
    def payment_refs(self) -> list[str]:
        return [ref for ref in (self.payment_ref, self.charge) if ref]


@dataclass(frozen=True)
class ProviderPayment:
    """A payment (PaymentIntent or Charge) as the provider knows it: what a refund is made against."""

    payment_ref: str
    currency: str
    amount: Decimal  # captured
    refunded: Decimal  # already refunded at the provider (pending included)
    account: str = ""  # the account it was found on ("" the platform's own)
    destination: str = ""  # a Connect destination (transfer_data.destination or on_behalf_of), if any
    metadata: dict[str, str] = field(default_factory=dict)
    charge: str = ""  # the charge it was paid by (for a PaymentIntent: its latest charge)
    disputed: bool = False

    @property
    def returnable(self) -> Decimal:
        return self.amount - self.refunded


@dataclass(frozen=True)
class ProviderDispute:
    """A dispute (chargeback or inquiry) on a payment, as the provider reports it."""

    provider_ref: str  # dp_…
    status: str  # the provider's own (needs_response, under_review, won, lost, warning_…)
    amount: Decimal
    currency: str
    charge: str = ""
    payment_intent: str = ""
    reason: str = ""
    is_charge_refundable: bool = False
    account: str = ""

    @property
    def payment_refs(self) -> list[str]:
        return [ref for ref in (self.payment_intent, self.charge) if ref]


class PaymentGateway:
    """A provider that executes refunds. Implementations raise
    `ledger.exceptions.PaymentProviderUnavailable` for anything transient, and return a
    ProviderRefund with status `failed` (and the provider's reason) for a refusal."""

    name: str = ""
    # Past this age the provider may have forgotten an idempotency key: look the refund up first.
    idempotency_window_seconds: int | None = None
    # Whether refunds are executed by a provider at all (False: paid by hand, nothing to compare).
    executes_refunds: bool = False

    def refund_create(self, request: RefundRequest) -> ProviderRefund:
        raise NotImplementedError

    def refund_get(self, *, provider_ref: str, account: str = "") -> ProviderRefund | None:
        """The provider's record of one refund, or None if it has none."""
        raise NotImplementedError

    def refund_find(
        self, *, payment_ref: str, metadata_key: str, metadata_value: str, account: str = ""
    ) -> ProviderRefund | None:
        """The refund on that payment whose metadata[key] is value, or None."""
        raise NotImplementedError

    def refunds_for_payment(self, *, payment_ref: str, account: str = "") -> list[ProviderRefund]:
        raise NotImplementedError

    def disputes_list(self, *, since: datetime, account: str = ""):
        """Every dispute created since `since` (an iterator of ProviderDispute; pages are followed)."""
        raise NotImplementedError

    def payment_get(self, *, payment_ref: str, account: str = "") -> ProviderPayment | None:
        """The provider's record of a payment (pi_… or ch_…) on `account`, or None if it has none there."""
        raise NotImplementedError

    def refunds_list(self, *, since: datetime, account: str = ""):
        """Every refund created since `since` (an iterator; pages are followed)."""
        raise NotImplementedError
