"""Receivers for signals sent by lower layers (approvals), which may not import this app."""
