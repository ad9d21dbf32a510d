"""Fault injection for the worker tests, never part of the product: a test puts this folder on
a Celery worker's PYTHONPATH, and Python imports this module at start-up.

With APPROVALS_CRASH_AFTER_LEDGER_WRITE_MARKER set to a path, the first refund executed in a
worker process whose marker does not exist yet creates the marker and SIGKILLs that process
right after the ledger write committed (before the task is acknowledged).

With PAYOUT_CRASH_AFTER_PROVIDER_CALL_MARKER set to a path, the first payout in a worker whose
marker does not exist yet creates the marker and SIGKILLs the whole worker (its process group:
the main process too, so nothing requeues the message) after the provider answered and before
the ledger recorded the answer.

With TICKET_FOLLOW_VERIFIED_FAIL_ONCE_MARKER set to a path, the first follow-up of a
`refund_verified` event (`ticket_events.ticket_follow`) in a worker whose marker does not exist
yet creates the marker and raises (a bug or a lock timeout in the ticket's follow-up, after the
money moved).
"""

import os
import signal
from pathlib import Path

CRASH_AFTER_LEDGER_WRITE_ENV = "APPROVALS_CRASH_AFTER_LEDGER_WRITE_MARKER"


def _crash_after_commit(sender, request, **kwargs):
    from django.db import transaction

    marker = Path(os.environ[CRASH_AFTER_LEDGER_WRITE_ENV])
    if marker.exists():
        return

    def crash():
        marker.write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)

    transaction.on_commit(crash)


def _connect(**kwargs):
    # In the worker's child process, once Django is set up.
    from approvals.signals import refund_executed

    refund_executed.connect(_crash_after_commit, dispatch_uid="tests.faults.crash_after_ledger_write")


PAYOUT_CRASH_ENV = "PAYOUT_CRASH_AFTER_PROVIDER_CALL_MARKER"


def _connect_payout_crash(**kwargs):
    from ledger import payouts

    record = payouts.ledger_refund_record_outcome

    def crash_before_record(**record_kwargs):
        marker = Path(os.environ[PAYOUT_CRASH_ENV])
        if not marker.exists():
            marker.write_text(str(os.getpid()))
            os.killpg(os.getpgid(0), signal.SIGKILL)
        return record(**record_kwargs)

    payouts.ledger_refund_record_outcome = crash_before_record


if os.environ.get(PAYOUT_CRASH_ENV):
    from celery.signals import worker_process_init

    worker_process_init.connect(_connect_payout_crash, weak=False)

if os.environ.get(CRASH_AFTER_LEDGER_WRITE_ENV):
    from celery.signals import worker_process_init

    worker_process_init.connect(_connect, weak=False)


FOLLOW_VERIFIED_FAIL_ONCE_ENV = "TICKET_FOLLOW_VERIFIED_FAIL_ONCE_MARKER"


def _connect_follow_verified_failure(**kwargs):
    from refundagent import ticket_events

    follow = ticket_events.ticket_follow

    def fail_once(*, signal, **follow_kwargs):
        marker = Path(os.environ[FOLLOW_VERIFIED_FAIL_ONCE_ENV])
        if signal.name == "refund_verified" and not marker.exists():
            marker.write_text(str(os.getpid()))
            raise RuntimeError("refund_verified follow-up failed (fault injected once)")
        return follow(signal=signal, **follow_kwargs)

    ticket_events.ticket_follow = fail_once


if os.environ.get(FOLLOW_VERIFIED_FAIL_ONCE_ENV):
    from celery.signals import worker_process_init

    worker_process_init.connect(_connect_follow_verified_failure, weak=False)
