"""Publish on commit, once for every layer (the outbox's last step; docs/architecture.md, "Outbox").

A hand-off is durable before it is published: the step writes its instruction (an approved
request, a queued ticket, a reply's row, a stored webhook event) in its own transaction. Handing
it to Celery afterwards only saves the sweep's wait, so a publish never raises: a broker that is
down is logged (and recorded, where the row keeps a count), and the sweep hands over again what
this could not. zulip's `send_event_on_commit` is the model.
"""

import logging
from collections.abc import Callable
from functools import partial

from django.db import DatabaseError, transaction

logger = logging.getLogger(__name__)


def outbox_publish(
    enqueue: Callable[[], object],
    *,
    what: str,
    handed_over: Callable[[], object] | None = None,
    not_handed_over: Callable[[Exception], object] | None = None,
    extra: dict | None = None,
) -> bool:
    """`enqueue()` (a task's delay or apply_async); True if the broker took it. Never raises.

    `handed_over()` then records the hand-off (the mark that spares the sweep a duplicate);
    `not_handed_over(exc)` records a failure. Both are bookkeeping after commit: they log what
    they cannot write and never raise either."""
    try:
        enqueue()
    except Exception as exc:  # noqa: BLE001 - any broker failure; the sweep re-sends the instruction
        logger.error("%s: enqueueing failed (%s); the sweep will re-send it", what, exc, extra=extra)
        _bookkeeping(not_handed_over and partial(not_handed_over, exc), what=what, extra=extra)
        return False
    _bookkeeping(handed_over, what=what, extra=extra)
    return True


def _bookkeeping(record: Callable[[], object] | None, *, what: str, extra: dict | None) -> None:
    if record is None:
        return
    try:
        record()
    except DatabaseError as exc:  # the mark only spares a duplicate hand-off; the broker has the task
        logger.warning("%s: recording its hand-off failed (%s)", what, exc, extra=extra)


def publish_on_commit(publish: Callable[..., object], /, **kwargs) -> None:
    """`publish(**kwargs)` once the current transaction commits (at once outside one); nothing
    if it rolls back, so a worker never looks for a row that was not written."""
    transaction.on_commit(partial(publish, **kwargs))
