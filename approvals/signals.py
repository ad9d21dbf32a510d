"""Signals for the layers above (the agent app listens; approvals never imports it).

Every signal is sent inside the transaction that made the change, so a receiver's writes
(ticket status, trace events) commit or roll back with it.
"""

from django.dispatch import Signal

# request=ApprovalRequest, vote=ApprovalVote|None, decision=str, actor=User|None
approval_decided = Signal()
# request=ApprovalRequest, entry=ledger.RefundEntry, replayed=bool
refund_executed = Signal()
# request=ApprovalRequest, verdict=dict (the evaluator's, with "ok": bool and the evidence)
refund_verified = Signal()
# request=ApprovalRequest (a new request replaced one whose facts changed): old=ApprovalRequest
approval_replaced = Signal()
