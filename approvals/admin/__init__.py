"""The finance review queue (Django admin) and the admins of policies, capabilities and votes,
one module per concern, as the ledger's models/ package is split:

- `review_queue.py`: the queue (ApprovalRequestAdmin) and the votes;
- `review_views.py`: its three custom views (decide, second factor, payout by hand);
- `queue_words.py`: the words and small reads they share;
- `policies.py`: policy versions, replays, decision records;
- `capabilities.py`: the capability registry and each tenant's capabilities.


The ApprovalRequest changelist is the queue: pending first, then oldest first, a constant number
of queries per page. The detail page shows everything needed to judge the one exact action
without leaving it; approve / deny / request changes / escalate go through the same service as
the API (approval_request_decide). Nothing here edits an amount or an argument: to change an
amount, finance requests changes and the agent drafts a new request with its own hash.
"""

from . import capabilities, policies, review_queue  # noqa: F401 - importing registers the admins
