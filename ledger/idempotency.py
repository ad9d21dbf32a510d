"""Idempotency-Key on API requests (Stripe's convention; docs/api.md "Conventions added later").

A key belongs to one user (so to one tenant): the same key from another user is another key.
The first request with a key inserts its row and holds it until it has answered; the response
is then stored. A later request with the key and the same request hash replays that response;
with another hash it is refused (409). A request that arrives while the first still runs waits
for it (up to IDEMPOTENCY_WAIT_SECONDS) and replays it, so concurrent retries make one effect.
Keys expire after IDEMPOTENCY_KEY_TTL_HOURS (default 24): an expired row is replaced.
"""

import hashlib
import json
import time
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from .exceptions import Conflict, IdempotencyConflict, InvalidInput
from .models import IdempotencyKey

MAX_KEY_LENGTH = 255


def idempotency_request_hash(*, method: str, path: str, body: bytes) -> str:
    """The same request, the same hash: JSON bodies are compared as data (key order and
    whitespace do not matter), anything else byte for byte."""
    try:
        canonical = json.dumps(json.loads(body), sort_keys=True, separators=(",", ":")).encode()
    except (ValueError, UnicodeDecodeError):
        canonical = body
    return hashlib.sha256(method.encode() + b" " + path.encode() + b"\n" + canonical).hexdigest()


# What `isprintable()` below accepts of a header (HTTP headers arrive as Latin-1), as the
# OpenAPI document's pattern for the header (refundagent/config/api.py).
KEY_PATTERN = r"^[\x20-\x7e\xa1-\xac\xae-\xff]+$"


def idempotency_key_claim(*, user, key: str, request_hash: str) -> IdempotencyKey | None:
    """None: the caller now holds the key and must answer, then `idempotency_key_complete` (or
    `idempotency_key_release` on a failure). A row: the stored response to replay.

    Raises IdempotencyConflict when the key was used with another request, Conflict when the
    first request is still running after the wait, InvalidInput for a malformed key."""
    if not key or len(key) > MAX_KEY_LENGTH or not key.isprintable():
        raise InvalidInput(
            f"Idempotency-Key must be 1 to {MAX_KEY_LENGTH} printable characters.", code="idempotency_key_invalid"
        )
    deadline = time.monotonic() + settings.IDEMPOTENCY_WAIT_SECONDS
    while True:
        now = timezone.now()
        try:
            # Its own transaction, committed at once: a concurrent insert of the same key waits
            # on the unique index and then fails, instead of both passing.
            with transaction.atomic():
                IdempotencyKey.objects.create(
                    user=user,
                    key=key,
                    request_hash=request_hash,
                    expires_at=now + timedelta(hours=settings.IDEMPOTENCY_KEY_TTL_HOURS),
                )
            return None
        except IntegrityError:
            pass
        row = IdempotencyKey.objects.filter(user=user, key=key).first()
        if row is None:
            continue  # released between our insert and this read: try to take it
        if row.expires_at <= now:
            IdempotencyKey.objects.filter(pk=row.pk, expires_at__lte=now).delete()
            continue
        if row.request_hash != request_hash:
            raise IdempotencyConflict(
                "This Idempotency-Key was already used with a different request.", code="idempotency_key_reused"
            )
        if row.status_code is not None:
            return row
        if time.monotonic() >= deadline:
            raise Conflict(
                "A request with this Idempotency-Key is still being processed; retry later.",
                code="idempotency_key_in_use",
            )
        time.sleep(0.05)


def idempotency_key_complete(*, user, key: str, status_code: int, body: bytes, content_type: str) -> None:
    IdempotencyKey.objects.filter(user=user, key=key, status_code__isnull=True).update(
        status_code=status_code, response_body=body, content_type=content_type[:100]
    )


def idempotency_key_release(*, user, key: str) -> None:
    """Forget a key whose request failed (5xx, throttled): a retry runs it anew."""
    IdempotencyKey.objects.filter(user=user, key=key, status_code__isnull=True).delete()


def idempotency_keys_purge(*, now=None) -> int:
    """Delete expired keys; returns how many."""
    return IdempotencyKey.objects.filter(expires_at__lte=now or timezone.now()).delete()[0]
