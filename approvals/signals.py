"""Signals for the layers above, one per event (the agent app listens; approvals never imports it).

Every signal is sent inside the transaction that made the change. Each receiver runs in its own
savepoint: what it writes (ticket status, trace events) commits with the change when it works.
A receiver that raises is rolled back alone and the change stands (a bug in a listener can never
undo finance's decision or the ledger write that was announced), and its event is not lost: it
is kept in the same transaction and retried by the sweep until the receiver takes it, in the
order the events of one ticket happened (approvals.followups).

Every signal carries `request` (the ApprovalRequest, as saved); the others are listed beside it.
A kept event carries them by id and reads them again when it is delivered.

One signal is a question, not an announcement: `approval_refile_check` is asked before a refused
payment is filed again, and a receiver refuses by raising (a DomainError: the caller answers
with it, and nothing is written). It is a plain Signal, so its receivers can stop the change.
"""

from django.dispatch import Signal

from .followups import (
    approval_event_deliver,
    approval_followup_receiver_key,
    approval_followup_receiver_register,
    approval_followup_receiver_unregister,
    approval_followups_waiting,
)

# The keyword the signal hands its wrapped receivers: which of them have an event of this
# ticket waiting (read once per event). Removed before a receiver is called.
_WAITING = "approval_followups_waiting"


class ApprovalEvent(Signal):
    """A Signal whose receivers cannot roll back the sender's transaction, and whose events are
    delivered to each receiver once, in order, however late (approvals.followups)."""

    def __init__(self, name: str):
        super().__init__()
        self.name = name

    def connect(self, receiver, sender=None, weak=True, dispatch_uid=None):
        key = approval_followup_receiver_key(receiver=receiver, dispatch_uid=dispatch_uid)
        approval_followup_receiver_register(signal=self, key=key, receiver=receiver)
        # The wrapper is held strongly (weak=False: nothing else refers to it); the uid lets
        # disconnect(receiver) find it again.
        super().connect(
            _delivered(receiver, key), sender=sender, weak=False, dispatch_uid=dispatch_uid or _uid(receiver)
        )

    def disconnect(self, receiver=None, sender=None, dispatch_uid=None):
        if receiver is not None or dispatch_uid:
            approval_followup_receiver_unregister(
                signal=self, key=approval_followup_receiver_key(receiver=receiver, dispatch_uid=dispatch_uid)
            )
        return super().disconnect(sender=sender, dispatch_uid=dispatch_uid or _uid(receiver))

    def send(self, sender, **named):
        if not self.has_listeners(sender):
            return []
        return super().send(sender, **named, **{_WAITING: approval_followups_waiting(request=named["request"])})


def _uid(receiver) -> tuple:
    return ("approval-event", id(receiver))


def _delivered(receiver, key: str):
    def deliver(signal=None, sender=None, **named):
        waiting = named.pop(_WAITING, frozenset())
        return approval_event_deliver(
            signal=signal, sender=sender, key=key, receiver=receiver, waiting=waiting, arguments=named
        )

    deliver.receiver = receiver
    return deliver


# request=ApprovalRequest (still pending), vote=ApprovalVote, actor=User: one approval of several
# distinct approvals the policy asks for; more are needed.
approval_vote_recorded = ApprovalEvent("approval_vote_recorded")
# request=ApprovalRequest (approved; the execution is enqueued on commit), vote=ApprovalVote, actor=User
approval_approved = ApprovalEvent("approval_approved")
# request=ApprovalRequest, vote=ApprovalVote|None, actor=User (vote None: the actor had voted before)
approval_denied = ApprovalEvent("approval_denied")
approval_changes_requested = ApprovalEvent("approval_changes_requested")
approval_escalated = ApprovalEvent("approval_escalated")
# request=ApprovalRequest: the sweep found it past its expiry (no actor)
approval_expired = ApprovalEvent("approval_expired")
# request=ApprovalRequest, actor=User|None, reason=str (what changed), verdict=dict (the gate's
# re-evaluation); request.replaced_by is the replacement, if any
approval_invalidated = ApprovalEvent("approval_invalidated")
# request=ApprovalRequest (the new one), old=ApprovalRequest (the one whose facts changed)
approval_replaced = ApprovalEvent("approval_replaced")
# request=ApprovalRequest, entry=ledger.RefundEntry, replayed=bool
refund_executed = ApprovalEvent("refund_executed")
# request=ApprovalRequest, verdict=dict (the evaluator's, with "ok": bool and the evidence;
# stage "execute" when the ledger refused the write, "verify" otherwise)
refund_verified = ApprovalEvent("refund_verified")
# request=ApprovalRequest (payment_failed, its order row locked): asked before finance files the
# refused payment again; a receiver refuses by raising a DomainError (the ticket a person closed
# or took into the human queue is theirs). Not an ApprovalEvent: its receivers' errors propagate.
approval_refile_check = Signal()
# request=ApprovalRequest (payment_failed), entry=ledger.RefundEntry (failed or canceled),
# reason=str (the provider's): the provider refused the payout; the amount is refundable again
refund_payment_failed = ApprovalEvent("refund_payment_failed")
