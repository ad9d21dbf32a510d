"""Refunds through Shopify (`refundCreate`), for payments Shopify took.

Each ledger entry (one tender leg of an approval) is one `refundCreate` on its order, with
`@idempotent(key:)` = the entry's idempotency key (the approval's, `<key>:leg<n>` for further
legs), so a retry after a lost answer, a 5xx or THROTTLED is the same refund. Its `transactions`
are the leg alone: `parentId` the leg's own sale transaction (a gift card leg only on the gift
card transaction), the gateway `suggestedRefund` names for that transaction, and the leg's
amount, never more than Shopify says the transaction can still return. Line items when the
approval names items; `notify: false` (the product sends its reply); the note names the ledger
entry and the approval, which is how a refund is found again and told apart from one made in
Shopify's admin. `userErrors` are a refusal (`failed`, with Shopify's message).
"""

from decimal import Decimal

from django.utils.dateparse import parse_datetime

from ..exceptions import PaymentProviderUnavailable, ShopifyRefused
from ..models import Payment, RefundEntry, RefundEntryItem, ShopifyConnection, ShopifyOrder
from ..shopify import queries
from ..shopify.connection import shopify_client_for
from ..shopify.mapping import shop_money
from .base import PaymentGateway, ProviderPayment, ProviderRefund, RefundRequest

# Shopify's transaction statuses, as ledger statuses.
STATUS_MAP = {"SUCCESS": "succeeded", "PENDING": "pending", "AWAITING_RESPONSE": "pending", "UNKNOWN": "pending"}


def _note_metadata(note: str | None) -> dict[str, str]:
    """`refundagent ledger_entry=12 approval=7 tenant=acme` as {"ledger_entry": "12", ...}."""
    text = note or ""
    if not text.startswith("refundagent "):
        return {}
    pairs = (part.split("=", 1) for part in text.split()[1:] if "=" in part)
    return {k: v for k, v in pairs}


def provider_refund_from_shopify(refund: dict, currency: str = "") -> ProviderRefund:
    txns = [t for t in (refund.get("transactions") or {}).get("nodes") or [] if t.get("kind") == "REFUND"]
    statuses = {t.get("status") for t in txns}
    if statuses and statuses <= {"SUCCESS"}:
        status = "succeeded"
    elif statuses & {"FAILURE", "ERROR"}:
        status = "failed"
    else:
        status = "pending"
    parents = [(t.get("parentTransaction") or {}).get("id") or "" for t in txns]
    total = refund.get("totalRefundedSet") or {}
    return ProviderRefund(
        provider_ref=refund.get("id") or "",
        status=status,
        amount=shop_money(total),
        currency=((total.get("shopMoney") or {}).get("currencyCode") or currency),
        payment_ref=parents[0] if parents else "",
        charge=parents[1] if len(parents) > 1 else "",
        metadata=_note_metadata(refund.get("note")),
        created=parse_datetime(refund["createdAt"]) if refund.get("createdAt") else None,
    )


class ShopifyGateway(PaymentGateway):
    name = "shopify"
    executes_refunds = True
    # Keys are kept by Shopify for a while; past a day the refund is first looked up by its note.
    idempotency_window_seconds = 24 * 3600

    def __init__(self, *, client_factory=None):
        self._client_for = client_factory or shopify_client_for

    # -- where a payment lives ---------------------------------------------------------------

    def _payment(self, payment_ref: str, tenant_slug: str = "") -> Payment | None:
        payments = Payment.objects.filter(payment_ref=payment_ref).select_related("order__tenant", "order__shopify")
        if tenant_slug:
            payments = payments.filter(order__tenant__slug=tenant_slug)
        return payments.first()

    def _order_gid(self, payment: Payment) -> tuple[ShopifyConnection, str]:
        link = ShopifyOrder.objects.filter(order_id=payment.order_id).select_related("connection__tenant").first()
        if link is None or link.connection.tenant_id != payment.order.tenant_id:
            raise ShopifyRefused(f"Order {payment.order.external_id} is not an order of a connected Shopify store.")
        return link.connection, link.shopify_id

    def _read(self, connection, query: str, variables: dict) -> dict:
        """A read the ledger cannot act without: a GraphQL error is no answer (the caller retries
        later, the entry stays as it is), never taken for "no refund there"."""
        try:
            return self._client_for(connection).graphql(query, variables)
        except ShopifyRefused as exc:
            raise PaymentProviderUnavailable(f"Shopify read failed: {exc.message}") from None

    def order_refunds_read(self, *, connection: ShopifyConnection, order_gid: str) -> dict:
        """The order's refunds and `totalRefundedSet` as Shopify has them (for reconciliation)."""
        return self._read(connection, queries.ORDER_REFUNDS, {"id": order_gid}).get("order") or {}

    def _order_refunds(self, connection, order_gid) -> tuple[dict, list[dict]]:
        order = self._read(connection, queries.ORDER_REFUNDS, {"id": order_gid}).get("order") or {}
        return order, order.get("refunds") or []

    # -- refunds -------------------------------------------------------------------------------

    def refund_create(self, request: RefundRequest) -> ProviderRefund:
        payment = self._payment(request.payment_ref, request.metadata.get("tenant", ""))
        if payment is None:
            return ProviderRefund.refused(
                request, f"payment_ref_unknown: no order of this shop was paid by {request.payment_ref}."
            )
        try:
            connection, order_gid = self._order_gid(payment)
        except ShopifyRefused as exc:
            return ProviderRefund.refused(request, f"shopify_not_connected: {exc.message}")
        client = self._client_for(connection)
        entry = RefundEntry.objects.filter(pk=request.metadata.get("ledger_entry") or 0).first()
        line_items = []
        if entry is not None:
            for item in RefundEntryItem.objects.filter(entry=entry).select_related("order_item"):
                gid = (item.order_item.options or {}).get("shopify_line_item")
                if gid:
                    line_items.append({"lineItemId": gid, "quantity": item.quantity, "restockType": "NO_RESTOCK"})
        variables = {"id": order_gid, "refundLineItems": line_items or None}
        suggested = (client.graphql(queries.SUGGESTED_REFUND, variables).get("order") or {}).get(
            "suggestedRefund"
        ) or {}
        # The leg's own transaction: its gateway and what it can still return, as Shopify says.
        own = next(
            (
                t
                for t in suggested.get("suggestedTransactions") or []
                if (t.get("parentTransaction") or {}).get("id") == request.payment_ref
            ),
            None,
        )
        if own is None:
            return ProviderRefund.refused(
                request, f"payment_not_refundable: Shopify suggests no refund on {request.payment_ref} for this order."
            )
        limit = shop_money(own.get("maximumRefundableSet")) if own.get("maximumRefundableSet") else None
        if limit is not None and limit < request.amount:
            return ProviderRefund.refused(
                request,
                f"payment_ref_exceeds: Shopify can return only {limit} on {request.payment_ref}, not {request.amount}.",
            )
        refund_input = {
            "orderId": order_gid,
            "currency": request.currency,
            "note": "refundagent " + " ".join(f"{k}={v}" for k, v in _note_pairs(request.metadata)),
            "notify": False,
            "transactions": [
                {
                    "orderId": order_gid,
                    "parentId": request.payment_ref,
                    "gateway": own.get("gateway") or payment.card_brand or "shopify_payments",
                    "kind": "REFUND",
                    "amount": str(request.amount),
                }
            ],
        }
        if line_items:
            refund_input["refundLineItems"] = line_items
        try:
            data = client.graphql(queries.REFUND_CREATE, {"input": refund_input, "key": request.idempotency_key})
        except ShopifyRefused as exc:
            return ProviderRefund.refused(request, f"shopify_refused: {exc.message}")
        answer = data.get("refundCreate") or {}
        errors = answer.get("userErrors") or []
        if errors:
            return ProviderRefund.refused(
                request, "shopify_user_error: " + "; ".join(e.get("message", "") for e in errors)
            )
        refund = answer.get("refund")
        if not refund:
            return ProviderRefund.refused(request, "shopify_no_refund: Shopify answered without a refund.")
        return provider_refund_from_shopify(refund, request.currency)

    def refund_get(self, *, provider_ref: str, account: str = "") -> ProviderRefund | None:
        entry = RefundEntry.objects.filter(gateway=RefundEntry.Gateway.SHOPIFY, provider_ref=provider_ref).first()
        link = (
            ShopifyOrder.objects.filter(order_id=entry.order_id).select_related("connection").first() if entry else None
        )
        if link is None:
            return None
        order, refunds = self._order_refunds(link.connection, link.shopify_id)
        found = next((r for r in refunds if r.get("id") == provider_ref), None)
        currency = (order.get("totalRefundedSet") or {}).get("shopMoney", {}).get("currencyCode", "")
        return provider_refund_from_shopify(found, currency) if found else None

    def refunds_for_payment(self, *, payment_ref: str, account: str = "") -> list[ProviderRefund]:
        payment = self._payment(payment_ref)
        if payment is None:
            return []
        connection, order_gid = self._order_gid(payment)
        _, refunds = self._order_refunds(connection, order_gid)
        found = [provider_refund_from_shopify(r, payment.currency) for r in refunds]
        return [r for r in found if payment_ref in r.payment_refs]

    def refund_find(
        self, *, payment_ref: str, metadata_key: str, metadata_value: str, account: str = ""
    ) -> ProviderRefund | None:
        if not metadata_value:
            return None
        for refund in self.refunds_for_payment(payment_ref=payment_ref):
            if refund.metadata.get(metadata_key) == metadata_value:
                return refund
        return None

    def payment_get(self, *, payment_ref: str, account: str = "") -> ProviderPayment | None:
        payment = self._payment(payment_ref)
        if payment is None:
            return None
        connection, order_gid = self._order_gid(payment)
        order = self._read(connection, queries.ORDER, {"id": order_gid}).get("order") or {}
        txn = next((t for t in order.get("transactions") or [] if t.get("id") == payment_ref), None)
        if txn is None:
            return None
        amount = shop_money(txn.get("amountSet"))
        returnable = Decimal(str((txn.get("maximumRefundableV2") or {}).get("amount") or "0"))
        return ProviderPayment(
            payment_ref=payment_ref,
            currency=order.get("currencyCode") or "",
            amount=amount,
            refunded=amount - returnable,
            metadata={"tenant": connection.tenant.slug},
        )

    def refunds_list(self, *, since, account: str = ""):
        return iter(())

    def disputes_list(self, *, since, account: str = ""):
        return iter(())


def _note_pairs(metadata: dict[str, str]):
    for key in ("ledger_entry", "approval", "ticket", "tenant"):
        if metadata.get(key):
            yield key, str(metadata[key]).replace(" ", "_")
