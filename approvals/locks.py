"""The lock order of the approvals layer, in one place (the same as the ledger's).

Every write that touches an approval request and its order locks the order row first, then the
approval request row; a policy change locks the tenant's current policy. Taking locks only
through these functions keeps two writers from ever waiting on each other in opposite order.
Call them inside `transaction.atomic()`.
"""

# Lock 1, the order row, is the ledger's own (ledger.locks): what is still refundable on it is
# decided under it, by both layers.
from ledger.locks import order_lock
from ledger.models import Order, Tenant

from .models import ApprovalRequest, RefundPolicy


def approval_request_lock(*, order_id: int, request_id: int) -> tuple[Order, ApprovalRequest]:
    """Lock 1 then lock 2: the order row, then the approval request row."""
    order = order_lock(order_id=order_id)
    request = ApprovalRequest.objects.select_for_update().get(pk=request_id)
    return order, request


def policy_current_lock(*, tenant: Tenant) -> RefundPolicy | None:
    """The tenant's current (published) policy, locked, so two publications serialise."""
    return RefundPolicy.objects.select_for_update().current_for(tenant)
