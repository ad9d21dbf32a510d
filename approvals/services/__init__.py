"""The approvals layer's services: one module per thing done to an approval request or a policy."""
