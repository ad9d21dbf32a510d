"""Helpers the test modules share (fixtures are in the root conftest.py)."""

import time


def wait_for(predicate, timeout: float = 90.0, what: str | None = None, *, pause: float = 0.3, tolerate=()):
    """The first truthy value of `predicate()` within `timeout` seconds, polled every `pause`.

    On timeout: an AssertionError naming `what`, or, without `what`, `predicate()`'s last value
    (falsy: the caller asserts it). Errors of the kinds in `tolerate` (a database or a server
    that is down on purpose) count as not yet."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except tolerate:
            value = None
        if value:
            return value
        time.sleep(pause)
    if what is not None:
        raise AssertionError(f"timed out waiting for {what}")
    return predicate()
