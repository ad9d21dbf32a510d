"""Upward notifications from the ledger (it never imports the layers above it).

refund_entry_status_changed(sender=RefundEntry, entry, from_status, to_status, reason): sent
inside the transaction that changed the entry's status (e.g. pending → failed), so a receiver
above (the ticket going back to finance as `payment_failed`) commits or rolls back with it.
"""

from django.dispatch import Signal

refund_entry_status_changed = Signal()
