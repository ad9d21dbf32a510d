"""A real model is slow and rate-limited; money must not wait for it. Real workers on Redis and
PostgreSQL, as docker-compose.yml runs them (the agent's queue on threads, money on its own).

- A 429 storm from the Messages API (every call refused for a while, then one in three): every
  ticket waits it out and reaches approval_required; none fails.
- An approval decided during a burst of 200 tickets starts its payout within seconds: the
  money queue's worker never waits behind the agent's backlog.
"""

import time

import pytest

from approvals.models import ApprovalRequest, RefundPolicy
from approvals.services.decisions import approval_request_decide
from ledger.models import RefundEntry
from refundagent.models import Ticket, TraceEvent
from refundagent.tests.fake_anthropic import FakeAnthropic, PlannedReplies
from tests.helpers import wait_for


def file(user, order="ORD-5001", message="Broken headphones, refund $120."):
    from refundagent.services import ticket_create

    return ticket_create(user=user, order=order, customer="CUST-1001", message=message, requested_amount="120.00")


@pytest.mark.worker
def test_a_429_storm_fails_no_ticket(celery_workers, demo, user):
    # given a Messages API that refuses every call for 4 s, then one call in three, each 429
    # with retry-after: 1, and the SDK's own retries off (every 429 reaches the loop)
    storm_ends = time.monotonic() + 4
    calls = {"n": 0}

    def rate_limited(body):
        calls["n"] += 1
        return time.monotonic() < storm_ends or calls["n"] % 3 == 0

    replies = PlannedReplies(turn_seconds=0.2, rate_limited=rate_limited, retry_after="1")
    with FakeAnthropic(responder=replies) as fake:
        celery_workers(
            queues="agent,money",
            pool="threads",
            concurrency=10,
            extra_env={
                "AGENT_PROVIDER": "anthropic",
                "ANTHROPIC_API_KEY": "test-key",
                "ANTHROPIC_BASE_URL": fake.url,
                "ANTHROPIC_MODEL": "claude-sonnet-5-5",
                "ANTHROPIC_MAX_RETRIES": "0",
                # The storm counts the loop's own model calls; the reply's second check (on with a
                # key) would add refusals that the loop never sees.
                "REPLY_MODEL_CHECK": "0",
            },
        )
        # (ten tickets on one order of one customer would go to a person by the demo policy's risk
        # rules, docs/api.md "Risk signals in the policy"; this test is about the storm)
        RefundPolicy.objects.filter(tenant=demo["acme"]).update(risk_rules={})
        # when ten tickets are filed into the storm
        tickets = [file(user("acme-support"), message=f"Broken headphones #{n}, refund $120.") for n in range(10)]
        ids = [t.pk for t in tickets]
        wait_for(
            lambda: not Ticket.objects.filter(pk__in=ids, status__in=["queued", "running"]).exists(),
            120,
            "every ticket to stop",
        )

    # then every ticket reached approval_required, none failed, and the storm was real
    statuses = list(Ticket.objects.filter(pk__in=ids).values_list("status", flat=True))
    assert statuses == ["approval_required"] * 10, statuses
    assert replies.refused >= 10
    waits = TraceEvent.objects.filter(ticket_id__in=ids, span="model", decision="provider_wait")
    assert waits.count() >= replies.refused  # each refusal was waited out, its retry-after honoured
    assert {e.data["wait_seconds"] for e in waits} == {1.0}


@pytest.mark.serial  # a wall-clock bound
@pytest.mark.worker
def test_an_approval_decided_during_a_burst_of_200_tickets_starts_its_payout_within_seconds(celery_workers, demo, user):
    # given the two workers of a deployment: the agent's (a slow model: 1 s a turn) and money's
    slow_model = {"AGENT_PROVIDER": "offline", "AGENT_OFFLINE_THINK_SECONDS": "1.0"}
    celery_workers(queues="agent", pool="threads", concurrency=8, extra_env=slow_model)
    celery_workers(queues="money", pool="prefork", concurrency=1, extra_env=slow_model)
    # and a ticket waiting for finance
    ticket = file(user("acme-support"))
    wait_for(lambda: Ticket.objects.filter(pk=ticket.pk, status="approval_required").exists(), 60, "the first draft")
    request = ApprovalRequest.objects.get(ticket_ref=ticket.pk)

    # when 200 tickets are filed at once, and finance approves while they queue
    for n in range(200):
        file(user("acme-support"), order="ORD-5002", message=f"Burst #{n}: refund please.")
    backlog = Ticket.objects.filter(status__in=["queued", "running"]).count()
    decided = time.monotonic()
    approval_request_decide(
        request_id=request.pk, user=user("acme-finance"), decision="approve", args_hash=request.args_hash
    )

    # then its payout is written within a few seconds, though the agent's backlog is still there
    wait_for(lambda: RefundEntry.objects.filter(idempotency_key=request.idempotency_key).exists(), 5, "the payout")
    started = time.monotonic() - decided
    assert backlog >= 190
    assert Ticket.objects.filter(status__in=["queued", "running"]).count() >= 150
    assert started < 5
