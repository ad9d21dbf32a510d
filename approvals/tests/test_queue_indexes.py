"""The review queue's reads are served by indexes: their cost does not grow with every request
ever made (benchmarks/admin_queue.py measures the page at 100,000 requests)."""

import pytest
from django.db import connection, transaction

from approvals.models import ApprovalRequest
from approvals.selectors import approvals_refused_by_provider

pytestmark = pytest.mark.django_db


def _plan(queryset) -> str:
    sql, params = queryset.query.sql_with_params()
    with transaction.atomic(), connection.cursor() as cursor:
        # Sequential scans discouraged: the test table is tiny, the production one is not.
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def test_the_banner_counts_refused_refunds_from_their_partial_index(tenant):
    # given the banner's read of a tenant's refunds the provider refused
    refused = approvals_refused_by_provider(ApprovalRequest.objects.filter(tenant=tenant)).values("pk")

    # when PostgreSQL plans it, then it reads the partial index of refused, unreplaced requests
    plan = _plan(refused)
    assert "approval_payment_failed_idx" in plan, plan


def test_a_requests_key_is_unique_through_one_index_and_an_exact_read_uses_it(tenant):
    # no `_like` index beside the unique one (0012), and a lookup by key is still an index read
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'approvals_approvalrequest' "
            "AND indexdef LIKE '%%(idempotency_key%%'"
        )
        indexes = cursor.fetchall()
    assert [name for name, _ in indexes] == ["approvals_approvalrequest_idempotency_key_key"]
    assert "UNIQUE" in indexes[0][1]
    plan = _plan(ApprovalRequest.objects.filter(idempotency_key="refund:acme:ticket-1:draft-1"))
    assert "approvals_approvalrequest_idempotency_key_key" in plan, plan
