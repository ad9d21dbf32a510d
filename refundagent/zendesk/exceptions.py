"""The Zendesk app's errors: domain errors carry their HTTP status (ledger.exceptions), the
client's errors say what the provider answered."""

from ledger.exceptions import DomainError, InvalidInput


class ZendeskRefused(InvalidInput):
    """Zendesk refused the credentials or the request (401, 403, 404, 422): retrying will not help."""

    code = "zendesk_refused"


class ZendeskUnavailable(DomainError):
    """Zendesk did not answer, answered 5xx, or the answer was lost: the result is unknown."""

    status_code = 503
    code = "zendesk_unavailable"


class ZendeskRateLimited(ZendeskUnavailable):
    """429: wait `retry_after` seconds (Zendesk's Retry-After) before the next call."""

    code = "zendesk_rate_limited"

    def __init__(self, message: str, *, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after
