"""Upward notifications from the ledger (it never imports the layers above it).

refund_entry_status_changed(sender=RefundEntry, entry, from_status, to_status, reason): sent
inside the transaction that changed the entry's status (e.g. pending → failed), so a receiver
above (the ticket going back to finance as `payment_failed`) commits or rolls back with it.

order_dispute_changed(sender=Dispute, dispute, order): sent inside the transaction that recorded
a dispute's new status (ledger.disputes), under the order's lock; the layers above hold the
order's refunds that wait for a decision or a payout while it is open.
"""

from django.dispatch import Signal

refund_entry_status_changed = Signal()
order_dispute_changed = Signal()
