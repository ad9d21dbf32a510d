"""The embedded default: a refund is recorded as paid out by hand (as before gateways existed)."""

from .base import PaymentGateway, ProviderRefund, RefundRequest


class ManualGateway(PaymentGateway):
    name = "manual"
    executes_refunds = False

    def refund_create(self, request: RefundRequest) -> ProviderRefund:
        # Finance pays by hand; the ledger's word is the record.
        return ProviderRefund(
            provider_ref="",
            status="succeeded",
            amount=request.amount,
            currency=request.currency,
            payment_ref=request.payment_ref,
            metadata=dict(request.metadata),
        )

    def refund_get(self, **kwargs):
        return None

    def refund_find(self, **kwargs):
        return None

    def refunds_for_payment(self, **kwargs):
        return []

    def refunds_list(self, **kwargs):
        return iter(())
