"""How long to wait before trying a failed step again, once for every layer: `first` after the
first failure, doubled after each further one, never more than `cap`.

Its callers keep their own settings (EMAIL_RETRY_SECONDS, ZENDESK_RETRY_SECONDS,
APPROVAL_FOLLOWUP_RETRY_SECONDS, ...) and their own jitter; Celery's `retry_backoff` covers
tasks that retry themselves.
"""


def retry_delay(*, attempts: int, first: float, cap: float) -> float:
    """The wait after the `attempts`-th failure (`attempts` <= 1 waits `first`)."""
    # 2**64 times any first wait in use is past its cap: doubling further changes nothing, and a row
    # that failed a million times does not make a million-bit number.
    doublings = min(max(attempts - 1, 0), 64)
    return min(first * 2**doublings, cap)
