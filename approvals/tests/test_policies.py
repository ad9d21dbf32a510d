"""Publishing and retiring a refund policy: one service (approvals.services.policies) behind the admin,
the demo and the evals."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from approvals.models import RefundPolicy
from approvals.services.policies import refund_policy_publish, refund_policy_retire
from ledger.exceptions import InvalidInput
from ledger.models import Tenant

pytestmark = pytest.mark.django_db


def draft_of(tenant, version="refund-policy-v5", **fields):
    return RefundPolicy.objects.create(
        tenant=tenant,
        version=version,
        status=RefundPolicy.Status.DRAFT,
        window_days=45,
        full_refund_statuses=["delivered"],
        item_refund_statuses=["delivered"],
        full_refund_destinations=["original"],
        item_refund_destinations=["original"],
        two_approver_threshold=Decimal("500.00"),
        two_approver_threshold_currency="USD",
        text="v5",
        **fields,
    )


def test_publishing_a_draft_retires_the_current_version_and_supersedes_it(demo):
    # given acme's current policy and a new draft
    acme = Tenant.objects.get(slug="acme")
    current = RefundPolicy.objects.current_for(acme)
    draft = draft_of(acme)
    # when the draft is published
    published = refund_policy_publish(tenant=acme, policy=draft)
    # then it is the current policy, superseding the old one, which is retired
    current.refresh_from_db()
    assert RefundPolicy.objects.current_for(acme) == published
    assert published.status == RefundPolicy.Status.PUBLISHED and published.published_at is not None
    assert published.supersedes == current
    assert current.status == RefundPolicy.Status.RETIRED and current.retired_at == published.published_at
    # and exactly one version of the tenant is published
    assert RefundPolicy.objects.filter(tenant=acme, status=RefundPolicy.Status.PUBLISHED).count() == 1


def test_publishing_keeps_other_tenants_policies(demo):
    # given two tenants with current policies
    acme, other = Tenant.objects.get(slug="acme"), Tenant.objects.exclude(slug="acme").first()
    assert other is not None
    others_current = RefundPolicy.objects.current_for(other)
    # when acme publishes a new version
    refund_policy_publish(tenant=acme, policy=draft_of(acme))
    # then the other tenant's current policy is untouched
    assert RefundPolicy.objects.current_for(other) == others_current


def test_only_a_draft_of_the_tenant_is_published(demo):
    # given acme's current (published) policy and another tenant's draft
    acme = Tenant.objects.get(slug="acme")
    other = Tenant.objects.exclude(slug="acme").first()
    current = RefundPolicy.objects.current_for(acme)
    foreign_draft = draft_of(other, version="other-v9")
    # when either is published for acme, then it is refused and nothing changes
    with pytest.raises(InvalidInput) as published_again:
        refund_policy_publish(tenant=acme, policy=current)
    with pytest.raises(InvalidInput) as foreign:
        refund_policy_publish(tenant=acme, policy=foreign_draft)
    assert published_again.value.code == "not_a_draft"
    assert foreign.value.code == "foreign_policy"
    assert RefundPolicy.objects.current_for(acme) == current
    foreign_draft.refresh_from_db()
    assert foreign_draft.status == RefundPolicy.Status.DRAFT


def test_publishing_on_a_date_records_that_date(demo):
    # given a draft and a publication date in the past
    acme = Tenant.objects.get(slug="acme")
    current = RefundPolicy.objects.current_for(acme)
    when = timezone.now() - timedelta(days=3)
    # when it is published on that date
    published = refund_policy_publish(tenant=acme, policy=draft_of(acme), now=when)
    # then both the publication and the retirement carry it
    current.refresh_from_db()
    assert published.published_at == when and current.retired_at == when


def test_retiring_leaves_the_tenant_without_a_current_policy(demo):
    # given acme with a current policy
    acme = Tenant.objects.get(slug="acme")
    assert RefundPolicy.objects.current_for(acme) is not None
    # when its policies are retired
    retired = refund_policy_retire(tenant=acme)
    # then none is current, and the retired ones say when
    assert retired == 1
    assert RefundPolicy.objects.current_for(acme) is None
    assert not RefundPolicy.objects.filter(tenant=acme, status=RefundPolicy.Status.RETIRED, retired_at=None).exists()
