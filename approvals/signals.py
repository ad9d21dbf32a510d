"""Signals for the layers above, one per event (the agent app listens; approvals never imports it).

Every signal is sent inside the transaction that made the change. Each receiver runs in its own
savepoint: what it writes (ticket status, trace events) commits with the change when it works,
and a receiver that raises is rolled back alone and logged. A bug in a listener can never undo
finance's decision or the ledger write that was announced.

Every signal carries `request` (the ApprovalRequest, as saved); the others are listed beside it.

One signal is a question, not an announcement: `approval_refile_check` is asked before a refused
payment is filed again, and a receiver refuses by raising (a DomainError: the caller answers
with it, and nothing is written). It is a plain Signal, so its receivers can stop the change.
"""

import logging

from django.db import transaction
from django.dispatch import Signal

logger = logging.getLogger(__name__)


class ApprovalEvent(Signal):
    """A Signal whose receivers cannot roll back the sender's transaction."""

    def connect(self, receiver, sender=None, weak=True, dispatch_uid=None):
        # The wrapper is held strongly (weak=False: nothing else refers to it); the uid lets
        # disconnect(receiver) find it again.
        super().connect(_isolated(receiver), sender=sender, weak=False, dispatch_uid=dispatch_uid or _uid(receiver))

    def disconnect(self, receiver=None, sender=None, dispatch_uid=None):
        return super().disconnect(sender=sender, dispatch_uid=dispatch_uid or _uid(receiver))


def _uid(receiver) -> tuple:
    return ("approval-event", id(receiver))


def _isolated(receiver):
    def run_in_savepoint(signal=None, sender=None, **kwargs):
        try:
            with transaction.atomic():
                return receiver(signal=signal, sender=sender, **kwargs)
        except Exception:  # noqa: BLE001 - a listener's bug must not undo the change it hears about
            request = kwargs.get("request")
            logger.exception(
                "receiver %s.%s failed on approval %s; its writes were rolled back, the change stands",
                receiver.__module__,
                receiver.__qualname__,
                getattr(request, "pk", None),
            )
            return None

    run_in_savepoint.receiver = receiver
    return run_in_savepoint


# request=ApprovalRequest (still pending), vote=ApprovalVote, actor=User: one approval of several
# distinct approvals the policy asks for; more are needed.
approval_vote_recorded = ApprovalEvent()
# request=ApprovalRequest (approved; the execution is enqueued on commit), vote=ApprovalVote, actor=User
approval_approved = ApprovalEvent()
# request=ApprovalRequest, vote=ApprovalVote|None, actor=User (vote None: the actor had voted before)
approval_denied = ApprovalEvent()
approval_changes_requested = ApprovalEvent()
approval_escalated = ApprovalEvent()
# request=ApprovalRequest: the sweep found it past its expiry (no actor)
approval_expired = ApprovalEvent()
# request=ApprovalRequest, actor=User|None, reason=str (what changed), verdict=dict (the gate's
# re-evaluation); request.replaced_by is the replacement, if any
approval_invalidated = ApprovalEvent()
# request=ApprovalRequest (the new one), old=ApprovalRequest (the one whose facts changed)
approval_replaced = ApprovalEvent()
# request=ApprovalRequest, entry=ledger.RefundEntry, replayed=bool
refund_executed = ApprovalEvent()
# request=ApprovalRequest, verdict=dict (the evaluator's, with "ok": bool and the evidence;
# stage "execute" when the ledger refused the write, "verify" otherwise)
refund_verified = ApprovalEvent()
# request=ApprovalRequest (payment_failed, its order row locked): asked before finance files the
# refused payment again; a receiver refuses by raising a DomainError (the ticket a person closed
# or took into the human queue is theirs). Not an ApprovalEvent: its receivers' errors propagate.
approval_refile_check = Signal()
# request=ApprovalRequest (payment_failed), entry=ledger.RefundEntry (failed or canceled),
# reason=str (the provider's): the provider refused the payout; the amount is refundable again
refund_payment_failed = ApprovalEvent()
