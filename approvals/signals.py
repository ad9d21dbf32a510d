"""Signals for the layers above (the agent app listens; approvals never imports it).

Every signal is sent inside the transaction that made the change, so a receiver's writes
(ticket status, trace events) commit or roll back with it.
"""

from django.dispatch import Signal

# request=ApprovalRequest, vote=ApprovalVote|None, decision=str, actor=User|None
# decision: "approve" (request.status says whether it was the final approval: `approved`, or
# still `pending` waiting for more distinct approvers), "deny", "request_changes", "escalate",
# "expire" (the sweep; actor None) or "invalidate" (facts changed; extra kwargs reason=str and
# verdict=dict, the gate's re-evaluation; request.replaced_by is the replacement, if any).
approval_decided = Signal()
# request=ApprovalRequest, entry=ledger.RefundEntry, replayed=bool
refund_executed = Signal()
# request=ApprovalRequest, verdict=dict (the evaluator's, with "ok": bool and the evidence;
# stage "execute" when the ledger refused the write, "verify" otherwise)
refund_verified = Signal()
# request=ApprovalRequest (a new request replaced one whose facts changed): old=ApprovalRequest
approval_replaced = Signal()
