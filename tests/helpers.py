"""Helpers the test modules share (fixtures are in the root conftest.py)."""

import time

from django.test import Client


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


def signed_in(account, client: Client | None = None, **attrs) -> Client:
    """A test client signed in as `account` (a new one unless `client` is given), with `attrs` set
    and saved on the account first (`signed_in(people["support"], is_staff=True)`)."""
    if attrs:
        for name, value in attrs.items():
            setattr(account, name, value)
        account.save()
    client = client if client is not None else Client()
    client.force_login(account)
    return client
