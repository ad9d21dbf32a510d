"""Payment gateways. `gateway_get()` is the configured one (settings.PAYMENT_GATEWAY);
`gateway_for(name)` the one an entry was written for (its `gateway` column)."""

from django.conf import settings

from .base import PaymentGateway, ProviderDispute, ProviderPayment, ProviderRefund, RefundRequest
from .manual import ManualGateway
from .shopify import ShopifyGateway
from .stripe import StripeGateway

__all__ = [
    "PaymentGateway",
    "ProviderDispute",
    "ProviderPayment",
    "ProviderRefund",
    "RefundRequest",
    "gateway_get",
    "gateway_for",
]


def gateway_for(name: str) -> PaymentGateway:
    if name == "stripe":
        return StripeGateway(
            api_key=settings.STRIPE_API_KEY,
            api_base=settings.STRIPE_API_BASE,
            max_network_retries=settings.STRIPE_MAX_NETWORK_RETRIES,
            timeout=settings.STRIPE_TIMEOUT_SECONDS,
        )
    if name == "shopify":
        return ShopifyGateway()
    return ManualGateway()


def gateway_get() -> PaymentGateway:
    return gateway_for(settings.PAYMENT_GATEWAY)
