"""The demo publishes its policy versions through approvals.services.policies.refund_policy_publish."""

import pytest

from approvals.models import RefundPolicy
from ledger.models import Tenant
from refundagent.demo import policy_publish_demo

pytestmark = pytest.mark.django_db


def test_the_demo_publishes_through_the_service_and_is_idempotent(demo):
    # given the demo's policies (v3 published 400 days ago, v4 200 days ago)
    acme = Tenant.objects.get(slug="acme")
    v3 = RefundPolicy.objects.get(tenant=acme, version="refund-policy-v3")
    v4 = RefundPolicy.objects.get(tenant=acme, version="refund-policy-v4")
    # then v4 is current and supersedes v3, retired on the day v4 was published
    assert RefundPolicy.objects.current_for(acme) == v4
    assert v4.supersedes == v3 and v3.status == RefundPolicy.Status.RETIRED and v3.retired_at == v4.published_at
    # when the demo runs again, nothing changes
    assert policy_publish_demo(acme) == v4
    assert RefundPolicy.objects.filter(tenant=acme).count() == 2
    assert RefundPolicy.objects.current_for(acme) == v4
