"""Domain errors. Every layer's errors derive from DomainError; the API maps them to HTTP once
(the API root, refundagent/config/api.py), by `status_code`."""


class DomainError(Exception):
    status_code = 400
    code = "domain_error"

    def __init__(self, message: str, *, code: str | None = None, details: dict | None = None):
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        self.details = details or {}


class InvalidInput(DomainError):
    status_code = 422
    code = "invalid_input"


class InvalidAmount(InvalidInput, ValueError):
    """Not an amount (`ledger.money.money_parse`): a 422 to the API and the services, and a
    ValueError so that a pydantic validator (API schemas, tool arguments, the importer) reports it
    as the field's validation error. `details["problem"]` says which rule it broke (a form
    words each its own way)."""

    code = "bad_amount"


class NotFound(DomainError):
    status_code = 404
    code = "not_found"


class Forbidden(DomainError):
    status_code = 403
    code = "forbidden"


class Conflict(DomainError):
    status_code = 409
    code = "conflict"


class RefundRefused(InvalidInput):
    """The ledger will not record this refund (cap, sign, currency, item already refunded)."""

    code = "refund_refused"


class IdempotencyConflict(Conflict):
    """The idempotency key was already used with different arguments."""

    code = "idempotency_conflict"


class ImportRefused(InvalidInput):
    code = "import_refused"


class PaymentProviderUnavailable(Exception):
    """The payment provider could not be reached or answered 5xx/429/401 after the SDK's own
    retries. Transient: NOT a DomainError, so the caller's task retries it (the same idempotency
    key makes the same refund), and nothing is recorded as failed."""


class EntryStatusConflict(Conflict):
    """A refund entry's status may not move that way (or it moved under us)."""

    code = "entry_status_conflict"


class ShopifyRefused(InvalidInput):
    """Shopify refused the connection's credentials or a request (its own message kept)."""

    code = "shopify_refused"


class ShopifyOrderRefused(InvalidInput):
    """One order from Shopify the product cannot take as it is (hostile or inconsistent data, more
    than it can read): the sync skips it, names it for the operator, and goes on."""

    code = "shopify_order_refused"
