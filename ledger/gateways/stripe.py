"""Refunds through Stripe with the official SDK (`stripe==16.1.0`).

The SDK does the network retries (`STRIPE_MAX_NETWORK_RETRIES`, reusing our Idempotency-Key,
so a retried create returns the refund already made) and the timeout (`STRIPE_TIMEOUT_SECONDS`).
What is left after those retries is either a refusal (a card or request error: the refund
`failed`, with Stripe's reason) or transient (`PaymentProviderUnavailable`: the caller retries
later with the same key).
"""

import functools
import logging
from datetime import UTC, datetime

import stripe

from ..exceptions import PaymentProviderUnavailable
from ..money import from_minor_units, to_minor_units
from .base import PaymentGateway, ProviderDispute, ProviderPayment, ProviderRefund, RefundRequest

logger = logging.getLogger(__name__)

# Stripe's refund statuses, as ledger statuses (requires_action: the customer must act; not final).
STATUS_MAP = {
    "pending": "pending",
    "requires_action": "pending",
    "succeeded": "succeeded",
    "failed": "failed",
    "canceled": "canceled",
}


@functools.lru_cache(maxsize=8)
def stripe_client(api_key: str, api_base: str, max_network_retries: int, timeout: float) -> stripe.StripeClient:
    """One client (and its keep-alive sessions) per configuration."""
    return stripe.StripeClient(
        api_key,
        base_addresses={"api": api_base} if api_base else None,
        max_network_retries=max_network_retries,
        http_client=stripe.RequestsClient(timeout=timeout),
    )


def payment_field(payment_ref: str) -> str:
    """Which create/list parameter names this payment: a PaymentIntent or a Charge."""
    if payment_ref.startswith("pi_"):
        return "payment_intent"
    if payment_ref.startswith(("ch_", "py_")):
        return "charge"
    raise ValueError(f"{payment_ref!r} is neither a PaymentIntent (pi_…) nor a Charge (ch_…).")


def _id(value) -> str:
    """An id, whether the field is the id or the expanded object."""
    if isinstance(value, dict):
        return value.get("id") or ""
    return value or ""


def provider_refund_from_stripe(refund, *, account: str = "") -> ProviderRefund:
    """A Stripe Refund object (SDK object or plain dict from a webhook) as a ProviderRefund."""
    if hasattr(refund, "to_dict"):
        refund = refund.to_dict()
    get = refund.get
    currency = (get("currency") or "").upper()
    payment, charge = (_id(get("payment_intent")) or _id(get("charge"))), _id(get("charge"))
    created = get("created")
    return ProviderRefund(
        provider_ref=get("id") or "",
        status=STATUS_MAP.get(get("status") or "", "pending"),
        amount=from_minor_units(int(get("amount") or 0), currency),
        currency=currency,
        payment_ref=payment,
        charge=charge,
        reason=get("failure_reason") or "",
        metadata={str(k): str(v) for k, v in dict(get("metadata") or {}).items()},
        created=datetime.fromtimestamp(int(created), tz=UTC) if created else None,
        account=account,
    )


def provider_dispute_from_stripe(dispute, *, account: str = "") -> ProviderDispute:
    """A Stripe Dispute object (SDK object or plain dict from a webhook) as a ProviderDispute."""
    if hasattr(dispute, "to_dict"):
        dispute = dispute.to_dict()
    currency = (dispute.get("currency") or "").upper()
    return ProviderDispute(
        provider_ref=dispute.get("id") or "",
        status=dispute.get("status") or "",
        amount=from_minor_units(int(dispute.get("amount") or 0), currency),
        currency=currency,
        charge=_id(dispute.get("charge")),
        payment_intent=_id(dispute.get("payment_intent")),
        reason=dispute.get("reason") or "",
        is_charge_refundable=bool(dispute.get("is_charge_refundable")),
        account=account,
    )


class StripeGateway(PaymentGateway):
    name = "stripe"
    executes_refunds = True
    idempotency_window_seconds = 24 * 3600  # Stripe keeps idempotency keys for at least 24 hours

    def __init__(self, *, api_key: str, api_base: str = "", max_network_retries: int = 2, timeout: float = 30.0):
        self.client = stripe_client(api_key, api_base, max_network_retries, timeout)

    @staticmethod
    def _options(account: str, **extra) -> dict:
        options = dict(extra)
        if account:
            options["stripe_account"] = account
        return options

    def refund_create(self, request: RefundRequest) -> ProviderRefund:
        params = {
            payment_field(request.payment_ref): request.payment_ref,
            "amount": to_minor_units(request.amount, request.currency),
            "metadata": dict(request.metadata),
        }
        try:
            refund = self.client.v1.refunds.create(
                params=params, options=self._options(request.account, idempotency_key=request.idempotency_key)
            )
        except stripe.IdempotencyError:
            # The key was used with other parameters: if that was our refund, it is the answer.
            found = self.refund_find(
                payment_ref=request.payment_ref,
                metadata_key="ledger_entry",
                metadata_value=request.metadata.get("ledger_entry", ""),
                account=request.account,
            )
            if found is not None:
                return found
            return self._refused(
                request, "idempotency_error", "The idempotency key was already used for another request."
            )
        except stripe.CardError as exc:
            return self._refused(request, exc.code or "card_error", exc.user_message or str(exc))
        except stripe.InvalidRequestError as exc:
            return self._refused(request, exc.code or "invalid_request", exc.user_message or str(exc))
        except stripe.StripeError as exc:
            # Network, 5xx, 429 and authentication errors, after the SDK's own retries.
            raise PaymentProviderUnavailable(f"Stripe: {type(exc).__name__}: {exc}") from exc
        return provider_refund_from_stripe(refund, account=request.account)

    @staticmethod
    def _refused(request: RefundRequest, code: str, message: str) -> ProviderRefund:
        return ProviderRefund.refused(request, f"{code}: {message}", account=request.account)

    def _list(self, params: dict, account: str):
        try:
            page = self.client.v1.refunds.list(params={"limit": 100, **params}, options=self._options(account))
            yield from page.auto_paging_iter()
        except stripe.StripeError as exc:
            raise PaymentProviderUnavailable(f"Stripe: {type(exc).__name__}: {exc}") from exc

    def refund_get(self, *, provider_ref: str, account: str = "") -> ProviderRefund | None:
        try:
            refund = self.client.v1.refunds.retrieve(provider_ref, options=self._options(account))
        except stripe.InvalidRequestError as exc:
            if exc.http_status == 404:
                return None
            raise PaymentProviderUnavailable(f"Stripe: {type(exc).__name__}: {exc}") from exc
        except stripe.StripeError as exc:
            raise PaymentProviderUnavailable(f"Stripe: {type(exc).__name__}: {exc}") from exc
        return provider_refund_from_stripe(refund, account=account)

    def refunds_for_payment(self, *, payment_ref: str, account: str = "") -> list[ProviderRefund]:
        return [
            provider_refund_from_stripe(r, account=account)
            for r in self._list({payment_field(payment_ref): payment_ref}, account)
        ]

    def refund_find(
        self, *, payment_ref: str, metadata_key: str, metadata_value: str, account: str = ""
    ) -> ProviderRefund | None:
        if not metadata_value:
            return None
        for refund in self.refunds_for_payment(payment_ref=payment_ref, account=account):
            if refund.metadata.get(metadata_key) == metadata_value:
                return refund
        return None

    def refunds_list(self, *, since: datetime, account: str = ""):
        for refund in self._list({"created": {"gte": int(since.timestamp())}}, account):
            yield provider_refund_from_stripe(refund, account=account)

    def disputes_list(self, *, since: datetime, account: str = ""):
        try:
            page = self.client.v1.disputes.list(
                params={"limit": 100, "created": {"gte": int(since.timestamp())}}, options=self._options(account)
            )
            for dispute in page.auto_paging_iter():
                yield provider_dispute_from_stripe(dispute, account=account)
        except stripe.StripeError as exc:
            raise PaymentProviderUnavailable(f"Stripe: {type(exc).__name__}: {exc}") from exc

    def payment_get(self, *, payment_ref: str, account: str = "") -> ProviderPayment | None:
        field_name = payment_field(payment_ref)
        try:
            if field_name == "payment_intent":
                intent = self.client.v1.payment_intents.retrieve(
                    payment_ref, params={"expand": ["latest_charge"]}, options=self._options(account)
                ).to_dict()
                charge = intent.get("latest_charge") if isinstance(intent.get("latest_charge"), dict) else {}
                owner = intent
            else:
                charge = self.client.v1.charges.retrieve(payment_ref, options=self._options(account)).to_dict()
                owner = charge
        except stripe.InvalidRequestError as exc:
            if exc.http_status == 404:
                return None
            raise PaymentProviderUnavailable(f"Stripe: {type(exc).__name__}: {exc}") from exc
        except stripe.StripeError as exc:
            raise PaymentProviderUnavailable(f"Stripe: {type(exc).__name__}: {exc}") from exc
        currency = (owner.get("currency") or "").upper()
        captured = charge.get("amount_captured")
        if captured is None:
            captured = owner.get("amount_received", owner.get("amount")) or 0
        return ProviderPayment(
            payment_ref=payment_ref,
            currency=currency,
            amount=from_minor_units(int(captured), currency),
            refunded=from_minor_units(int(charge.get("amount_refunded") or 0), currency),
            account=account,
            destination=_id((owner.get("transfer_data") or {}).get("destination")) or _id(owner.get("on_behalf_of")),
            metadata={str(k): str(v) for k, v in dict(owner.get("metadata") or {}).items()},
            charge=_id(charge) if charge else "",
            disputed=bool(charge.get("disputed")),
        )
