"""Publishing a refund policy: the one way a tenant's current policy changes.

A draft is published, the current version is retired and the new one supersedes it, in one
transaction with the tenant's current policy locked (approvals.locks), so two publications never
leave a tenant with two current policies. Used by the admin, the demo and the evals.
"""

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from ledger.exceptions import InvalidInput
from ledger.models import Tenant

from .locks import policy_current_lock
from .models import RefundPolicy


def refund_policy_publish(*, tenant: Tenant, policy: RefundPolicy, now: datetime | None = None) -> RefundPolicy:
    """Publish the draft `policy` as `tenant`'s current policy and retire the one it replaces.
    Pending approval requests made under the old version are re-checked before approval."""
    if policy.tenant_id != tenant.pk:
        raise InvalidInput(f"{policy.version} is not a policy of {tenant}.", code="foreign_policy")
    if policy.status != RefundPolicy.Status.DRAFT:
        raise InvalidInput(f"{policy.version} is {policy.status}; only drafts are published.", code="not_a_draft")
    now = now or timezone.now()
    with transaction.atomic():
        current = policy_current_lock(tenant=tenant)
        policy.status, policy.published_at = RefundPolicy.Status.PUBLISHED, now
        if current is not None and not hasattr(current, "superseded_by"):
            policy.supersedes = current
        policy.save()
        if current is not None:
            current.status, current.retired_at = RefundPolicy.Status.RETIRED, now
            current.save()
    return policy


def refund_policy_retire(*, tenant: Tenant, now: datetime | None = None) -> int:
    """Retire every published policy of `tenant`, leaving it with no current policy (every
    refund then escalates). Returns how many were retired."""
    now = now or timezone.now()
    retired = 0
    with transaction.atomic():
        published = (
            RefundPolicy.objects.select_for_update().for_tenant(tenant).filter(status=RefundPolicy.Status.PUBLISHED)
        )
        for policy in published:
            policy.status, policy.retired_at = RefundPolicy.Status.RETIRED, now
            policy.save()
            retired += 1
    return retired
