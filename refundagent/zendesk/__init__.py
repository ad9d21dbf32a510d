"""Zendesk, both ways: tickets from a tenant's Zendesk account, outcomes written back to it
(docs/inbox.md, "Zendesk"). A Django app of its own (label `zendesk`) so its tables and
migrations stay apart from the agent's; it sits in the refundagent layer."""
