"""Model replay in shadow (docs/replay.md): another model runs on recorded tickets against the
recorded tool results; nothing it drafts reaches a ticket, an approval or the ledger, and the
result lists exactly the tickets where it disagrees with what happened."""

import io
import json

import pytest
from django.core.management import CommandError, call_command

from approvals.models import ApprovalRequest, ApprovalVote, DecisionRecord
from ledger.models import Order, RefundEntry, Tenant
from refundagent.agent.loop import agent_run_ticket
from refundagent.agent.providers.offline import OfflineProvider
from refundagent.agent.providers.scripted import ScriptedProvider
from refundagent.agent.shadow import model_replay_create, model_replay_run
from refundagent.models import AgentRun, ModelReplay, RefundDraft, Ticket, TraceEvent
from tests.factories import refund_draft

# A model that looks the order up, tries to pay out itself, then drafts a refund of 50.00.
DISAGREEING = [
    {"tools": [{"tool": "orders.lookup_order", "input": {"order_id": "ORD-5001"}}]},
    {"tool": "refunds.issue_refund", "input": {"order_id": "ORD-5001", "amount": "50.00"}},
    refund_draft("ORD-5001", amount="50.00"),
]


@pytest.fixture(autouse=True)
def _script(monkeypatch):
    """AGENT_PROVIDER=scripted's script (replays made with provider "scripted" check it is there;
    tests that pass a provider of their own run that one)."""
    monkeypatch.setenv("AGENT_SCRIPT", json.dumps(DISAGREEING))


@pytest.fixture
def ticket_defaults():
    return {"order": "ORD-5001", "message": "It arrived broken. Please refund me."}


@pytest.fixture
def recorded(file_ticket):
    """Tickets the offline agent decided: ORD-5001 (a refund of 120.00), ORD-5003 (50.00) and
    ORD-5002 (escalated: outside the window); and one of globex."""
    tickets = {order: file_ticket(order=order) for order in ("ORD-5001", "ORD-5003", "ORD-5002")}
    tickets["ORD-7001"] = file_ticket(order="ORD-7001", username="globex-support", customer="CUST-2001")
    for ticket in tickets.values():
        agent_run_ticket(ticket_id=ticket.pk, provider=OfflineProvider())
    return tickets


def written() -> tuple:
    return (
        list(Ticket.objects.order_by("pk").values_list("status", "updated_at")),
        AgentRun.objects.count(),
        RefundDraft.objects.count(),
        TraceEvent.objects.count(),
        list(ApprovalRequest.objects.order_by("pk").values_list("status", "updated_at")),
        ApprovalVote.objects.count(),
        RefundEntry.objects.count(),
        DecisionRecord.objects.count(),
    )


def run_command(*args) -> list[str]:
    out = io.StringIO()
    call_command("replay_model", *args, stdout=out)
    return out.getvalue().strip().splitlines()


def test_a_scripted_model_that_disagrees_on_known_tickets_reports_exactly_those(recorded, monkeypatch):
    # given a model that drafts 50.00 whatever the ticket (the scripted provider, through the command)
    monkeypatch.setenv("AGENT_SCRIPT", json.dumps(DISAGREEING))
    before = written()

    # when acme's recorded tickets are replayed with it in shadow
    lines = run_command("--tenant", "acme", "--provider", "scripted", "--model", "scripted-v2")

    # then it agrees on ORD-5003 (50.00 drafted then too) and differs on exactly ORD-5001 and ORD-5002
    replay = ModelReplay.objects.get()
    result = replay.result
    assert {row["order"] for row in result["differences"]} == {"ORD-5001", "ORD-5002"}
    assert (result["tickets"], result["agreed"], replay.agreed) == (3, 1, 1)
    by_order = {row["order"]: row for row in result["rows"]}
    assert (
        by_order["ORD-5001"]["recorded"]["amount"] == "120.00" and by_order["ORD-5001"]["shadow"]["amount"] == "50.00"
    )
    assert by_order["ORD-5001"]["same_outcome"] and not by_order["ORD-5001"]["same_draft"]
    # ORD-5002 is 45 days old: the gate escalates the shadow's refund too, from the recorded facts
    assert (
        by_order["ORD-5002"]["shadow"]["outcome"] == "escalated"
        and "outside_window" in by_order["ORD-5002"]["shadow"]["codes"]
    )
    # its reads were answered from the recorded run, and its own payout was denied, not made
    assert all(
        row["not_recorded_calls"] == [] and row["denied_calls"] == ["refunds_issue_refund"] for row in result["rows"]
    )
    assert result["tokens"] == 3 * 3 * 120 and replay.model == "scripted-v2"
    assert lines[-1].startswith("replay_model provider=scripted model=scripted-v2 tickets=3 agreed=1 agreement=0.3333")
    assert sum(f"{recorded[o].pk}" in line and o in line for o in ("ORD-5001", "ORD-5002") for line in lines) == 2
    # and nothing but the replay was written
    assert written() == before


def test_the_shadow_reads_the_recorded_results_not_the_shop_as_it_is_now(recorded):
    # given ORD-5001 was cancelled and fully refunded by hand since its ticket was decided
    Order.objects.filter(tenant__slug="acme", external_id="ORD-5001").update(status="cancelled")
    replay = model_replay_create(tenant=Tenant.objects.get(slug="acme"), provider="scripted", limit=10)

    # when a model that drafts the recorded 120.00 replays it
    agreeing = ScriptedProvider([DISAGREEING[0], refund_draft("ORD-5001", amount="120.00")])
    replay = model_replay_run(replay_id=replay.pk, provider=agreeing)

    # then the lookup was answered from the recorded run, and the gate decided on the recorded facts
    row = next(row for row in replay.result["rows"] if row["order"] == "ORD-5001")
    assert row["agreed"] and row["shadow"]["outcome"] == "approval_required"


def test_a_reply_promising_payment_is_reported_as_a_promise_stopped(recorded):
    promising = ScriptedProvider(
        [refund_draft("ORD-5003", amount="50.00", reply="Good news: your refund of 50.00 has been processed today.")]
    )
    replay = model_replay_create(tenant=Tenant.objects.get(slug="acme"), provider="scripted")

    replay = model_replay_run(replay_id=replay.pk, provider=promising)

    row = next(row for row in replay.result["rows"] if row["order"] == "ORD-5003")
    assert row["promise_stopped"] and row["shadow"]["outcome"] == "escalated" and not row["agreed"]
    assert replay.result["promises_stopped"] == 3


def test_model_replays_are_tenant_scoped_and_limited(recorded):
    globex = Tenant.objects.get(slug="globex")
    replay = model_replay_run(
        replay_id=model_replay_create(tenant=globex, provider="scripted").pk,
        provider=ScriptedProvider([refund_draft("ORD-7001", amount="60.00")]),
    )
    assert [row["order"] for row in replay.result["rows"]] == ["ORD-7001"] and replay.agreed == 1
    limited = model_replay_run(
        replay_id=model_replay_create(tenant=Tenant.objects.get(slug="acme"), provider="scripted", limit=2).pk,
        provider=ScriptedProvider([refund_draft("ORD-5001")]),
    )
    assert limited.result["tickets"] == 2


@pytest.mark.parametrize(
    "args, message",
    [
        (["--days", "0"], "--days"),
        (["--limit", "0"], "--limit"),
        (["--tenant", "nope"], "No tenant"),
        (["--provider", "anthropic"], "ANTHROPIC_API_KEY"),
        (["--provider", "scripted"], "AGENT_SCRIPT"),
        (["--model", "claude\x00"], "--model"),
    ],
)
def test_bad_model_replays_are_refused_and_write_nothing(demo, args, message, settings, monkeypatch):
    settings.ANTHROPIC_API_KEY = ""
    monkeypatch.delenv("AGENT_SCRIPT", raising=False)
    tenant = [] if "--tenant" in args else ["--tenant", "acme"]
    provider = [] if "--provider" in args else ["--provider", "offline"]
    with pytest.raises(CommandError, match=message):
        run_command(*tenant, *provider, *args)
    assert not ModelReplay.objects.exists()


def test_an_operator_starts_a_model_replay_in_the_admin_and_reads_its_differences(
    recorded, user, monkeypatch, django_capture_on_commit_callbacks
):
    from django.test import Client

    monkeypatch.setenv("AGENT_SCRIPT", json.dumps(DISAGREEING))
    operator = Client()
    operator.force_login(user("ops"))
    before = written()

    # when the operator starts a replay with the scripted model (the task runs on commit)
    with django_capture_on_commit_callbacks(execute=True):
        response = operator.post(
            "/admin/refundagent/modelreplay/add/", {"provider": "scripted", "model": "", "days": "30", "limit": ""}
        )
    replay = ModelReplay.objects.get()
    assert response.status_code == 302 and response["Location"].endswith(f"/modelreplay/{replay.pk}/change/")
    page = operator.get(response["Location"]).content.decode()

    # then its page shows the agreement and links exactly the tickets that differ
    assert 'id="ra-model-replay-differences"' in page and "1 of 3" in page
    assert (
        f'href="/tickets/{recorded["ORD-5001"].pk}/"' in page and f'href="/tickets/{recorded["ORD-5002"].pk}/"' in page
    )
    assert f'href="/tickets/{recorded["ORD-5003"].pk}/"' not in page
    assert replay.tenant.slug == "acme" and written() == before
    # a bad start is refused and starts nothing
    bad = operator.post("/admin/refundagent/modelreplay/add/", {"provider": "scripted", "days": "0"})
    assert bad.status_code == 422 and ModelReplay.objects.count() == 1
