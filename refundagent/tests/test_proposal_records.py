"""A person's proposal is a gate decision too (docs/replay.md): it keeps its facts, who proposed it
and the rules the person waived, in the transaction that makes its request; a policy replay
decides it again with the same waivers, so an exception a person made is not reported as a flip
because the draft's rule would have refused it without the waiver."""

import re
from decimal import Decimal

import pytest
from django.db import IntegrityError, InternalError, connection, transaction
from django.test import Client

from approvals.models import ApprovalRequest, DecisionRecord, PolicyReplay
from ledger.exceptions import InvalidInput
from ledger.models import Order
from refundagent import services
from refundagent.agent.loop import agent_run_ticket
from refundagent.agent.providers.offline import OfflineProvider
from refundagent.exceptions import TicketStateConflict
from refundagent.models import Ticket
from refundagent.services import ticket_refund_propose
from refundagent.tests.test_policy_replay import run, summary, written_elsewhere

REASON = "The courier lost the parcel; a loyal customer."


@pytest.fixture
def ticket_defaults():
    return {"order": "ORD-5001", "message": "It arrived broken. Please refund me."}


@pytest.fixture
def decided(file_ticket):
    """acme's agent decisions: ORD-5001 (120.00, 12 days old) and ORD-5003 (50.00, 5 days) go to
    finance; ORD-5002 (80.00, 45 days, outside the 30-day window) is escalated. Globex's ORD-7001
    (60.00, 3 days) goes to its finance."""
    tickets = {order: file_ticket(order=order) for order in ("ORD-5001", "ORD-5003", "ORD-5002")}
    tickets["ORD-7001"] = file_ticket(order="ORD-7001", username="globex-support", customer="CUST-2001")
    for ticket in tickets.values():
        agent_run_ticket(ticket_id=ticket.pk, provider=OfflineProvider())
        ticket.refresh_from_db()
    assert tickets["ORD-5002"].status == Ticket.Status.ESCALATED
    return tickets


@pytest.fixture
def excepted(decided, user):
    """acme-support's exception on the escalated ORD-5002: all 80.00, the window waived."""
    return ticket_refund_propose(
        ticket=decided["ORD-5002"], user=user("acme-support"), amount="80.00", reason=REASON, exception=True
    )


def proposal_records():
    return DecisionRecord.objects.filter(source=DecisionRecord.Source.PROPOSAL)


def test_a_proposal_records_one_decision_with_its_facts_waivers_and_proposer(decided, user, api_client):
    # given the agent's escalation of ORD-5002 recorded
    ticket = decided["ORD-5002"]
    records = DecisionRecord.objects.count()

    # when support proposes an exception through the API
    response = api_client(user("acme-support")).post(
        f"/api/tickets/{ticket.pk}/proposal",
        {"amount": "80.00", "reason": REASON, "exception": True},
        content_type="application/json",
    )

    # then exactly one more record: the person's proposal, with what the gate decided on and what was waived
    assert response.status_code == 201, response.content
    assert DecisionRecord.objects.count() == records + 1
    record = proposal_records().get()
    request = ApprovalRequest.objects.get(pk=response.json()["id"])
    assert (record.tenant_id, record.ticket_ref, record.order_id) == (ticket.tenant_id, ticket.pk, request.order_id)
    assert record.proposed_by == user("acme-support") and record.policy_exception is True
    assert record.waived_rules == request.waived_rules == ["window"]
    assert (record.order_external_id, record.order_status, record.order_age_days) == ("ORD-5002", "delivered", 45)
    assert (record.order_total, record.order_refunded, record.order_exposure) == (
        Decimal("80.00"),
        Decimal("0.00"),
        Decimal("0.00"),  # the request this proposal made is left out, as for the agent's
    )
    assert record.order_lines == [
        {"line_no": 1, "item_id": "ITEM-2", "price": "80.00", "quantity": 1, "refunded_quantity": 0}
    ]
    assert [payment["returnable"] for payment in record.order_payments] == ["80.00"]
    assert record.order_disputes == []
    assert record.requested_amount == Decimal("80.00") and record.destination["kind"] == "original"
    assert record.proposal["recommendation"] == "refund" and record.proposal["amount"] == "80.00"
    assert record.proposal["policy_version"] == record.policy_version == request.policy_version
    assert (record.outcome, record.allowed_amount, record.codes) == ("approval_required", Decimal("80.00"), [])
    assert record.required_approvals == request.required_approvals == 2
    # and the agent's escalation of the same ticket stays the agent's record, without waivers
    agent = DecisionRecord.objects.get(ticket_ref=ticket.pk, source=DecisionRecord.Source.AGENT)
    assert (agent.outcome, agent.waived_rules, agent.proposed_by, agent.policy_exception) == (
        "escalated",
        [],
        None,
        False,
    )


def test_a_proposal_within_the_policy_records_no_waiver_even_when_called_an_exception(decided, user):
    # given ORD-5003's ticket back in the queue (finance denied the agent's request)
    ticket = decided["ORD-5003"]
    Ticket.objects.filter(pk=ticket.pk).update(status=Ticket.Status.ESCALATED)
    ApprovalRequest.objects.filter(ticket_ref=ticket.pk).update(status=ApprovalRequest.Status.DENIED)
    ticket.refresh_from_db()

    # when the lead proposes 20.00 "as an exception" on an order the policy allows anyway
    ticket_refund_propose(ticket=ticket, user=user("acme-lead"), amount="20.00", reason="Goodwill.", exception=True)

    # then nothing was waived (no rule was broken), but it stays an exception: two approvers
    record = proposal_records().get()
    assert (record.waived_rules, record.policy_exception, record.required_approvals) == ([], True, 2)
    assert record.proposed_by == user("acme-lead") and record.allowed_amount == Decimal("20.00")


def test_a_refused_proposal_writes_no_record(decided, user):
    # given the escalated ORD-5002, outside the window
    records = DecisionRecord.objects.count()

    # when support proposes it without an exception, and then above what is refundable
    with pytest.raises(InvalidInput) as refused:
        ticket_refund_propose(ticket=decided["ORD-5002"], user=user("acme-support"), amount="80.00", reason="")
    assert refused.value.code == "outside_window"
    with pytest.raises(InvalidInput):
        ticket_refund_propose(
            ticket=decided["ORD-5002"], user=user("acme-support"), amount="80.01", reason=REASON, exception=True
        )

    # then no record: a refusal is a 422 that writes nothing; the person's next proposal is the decision
    assert DecisionRecord.objects.count() == records


@pytest.mark.parametrize("fails", ["the ticket moved on", "the record cannot be written"])
def test_a_failure_after_the_gate_rolls_back_the_record_with_the_proposal(decided, user, monkeypatch, fails):
    # given a proposal whose transaction fails after the gate decided
    if fails == "the ticket moved on":
        monkeypatch.setattr(services, "ticket_transition", lambda **kwargs: False)
        error = TicketStateConflict
    else:

        def refuse(**kwargs):
            raise IntegrityError("disk full")

        monkeypatch.setattr(DecisionRecord.objects, "create", refuse)
        error = IntegrityError
    records, requests = DecisionRecord.objects.count(), ApprovalRequest.objects.count()

    # when support proposes the exception
    with pytest.raises(error):
        ticket_refund_propose(
            ticket=decided["ORD-5002"], user=user("acme-support"), amount="80.00", reason=REASON, exception=True
        )

    # then neither the request nor its record was written, and the ticket is still escalated
    assert (DecisionRecord.objects.count(), ApprovalRequest.objects.count()) == (records, requests)
    assert Ticket.objects.get(pk=decided["ORD-5002"].pk).status == Ticket.Status.ESCALATED


def test_a_proposal_record_is_append_only(excepted):
    record = proposal_records().get()
    with pytest.raises((InternalError, IntegrityError)), transaction.atomic():
        DecisionRecord.objects.filter(pk=record.pk).update(waived_rules=[], policy_exception=False)
    with pytest.raises((InternalError, IntegrityError)), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM approvals_decisionrecord WHERE id = %s", [record.pk])
    record.refresh_from_db()
    assert (record.waived_rules, record.policy_exception) == (["window"], True)


def test_a_replay_does_not_flip_an_exception_a_person_made(excepted):
    # given an unchanged copy of the policy
    run("policy_draft", "--tenant", "acme", "--name", "refund-policy-same")

    # when it is replayed over the agent's three decisions and the person's exception
    lines = run("replay_policy", "--tenant", "acme", "--draft", "refund-policy-same")

    # then nothing flips: the exception is decided with the window waived, as it was
    line = summary(lines)
    assert (line["decisions"], line["flipped"]) == ("4", "0")
    assert (line["before"], line["after"]) == ("250.00", "250.00")  # 120.00 + 50.00 + the exception's 80.00
    result = PolicyReplay.objects.get(draft__version="refund-policy-same").result
    assert result["sources"]["agent"] == {"decisions": 3, "flipped": 0, "directions": {}, "waivers_widened": 0}
    assert result["sources"]["proposal"] == {"decisions": 1, "flipped": 0, "directions": {}, "waivers_widened": 0}
    assert result["dual_control_newly_needed"] == 0  # the exception needed two approvers then too
    assert any(text.startswith("people's proposals") and " 1 " in text for text in lines)


def test_a_shorter_window_flips_the_agent_decision_but_not_the_waived_proposal(excepted, decided):
    # given a draft whose window is 7 days instead of 30 (ORD-5001 is 12 days old, ORD-5002 45)
    run("policy_draft", "--tenant", "acme", "--name", "refund-policy-v5", "--set", "window_days=7")

    # when it is replayed
    line = summary(run("replay_policy", "--tenant", "acme", "--draft", "refund-policy-v5"))

    # then only the agent's ORD-5001 flips; the person waived the window on ORD-5002, whatever its length
    result = PolicyReplay.objects.get(draft__version="refund-policy-v5").result
    assert (line["flipped"], line["difference"]) == ("1", "-120.00")
    assert [(f["ticket"], f["source"]) for f in result["flipped_tickets"]] == [(decided["ORD-5001"].pk, "agent")]
    assert result["sources"]["agent"]["flipped"] == 1
    assert result["sources"]["proposal"] == {"decisions": 1, "flipped": 0, "directions": {}, "waivers_widened": 0}


def test_a_draft_that_no_longer_lets_a_person_waive_the_window_flips_the_exception(excepted, decided):
    # given a draft that lets a person waive only the order status
    run("policy_draft", "--tenant", "acme", "--name", "v5-no-window-exceptions", "--set", "waivable_rules=order_status")

    # when it is replayed
    lines = run("replay_policy", "--tenant", "acme", "--draft", "v5-no-window-exceptions")

    # then the exception flips: under the draft the person could not have gone outside the window
    result = PolicyReplay.objects.get(draft__version="v5-no-window-exceptions").result
    assert summary(lines)["difference"] == "-80.00"
    assert result["sources"]["proposal"] == {
        "decisions": 1,
        "flipped": 1,
        "directions": {"refund -> escalate": 1},
        "waivers_widened": 0,
    }
    assert result["sources"]["agent"]["flipped"] == 0
    flip = result["flipped_tickets"][0]
    assert (flip["ticket"], flip["source"], flip["codes_after"]) == (
        decided["ORD-5002"].pk,
        "proposal",
        ["outside_window"],
    )
    assert any(str(decided["ORD-5002"].pk) in text and text.endswith("person") for text in lines)


def test_a_draft_breaking_another_rule_flips_a_plain_proposal_but_an_exception_waives_it_too(excepted, decided, user):
    # given also support's plain proposal (no exception) of 20.00 on ORD-5003, back in the queue
    ticket = decided["ORD-5003"]
    Ticket.objects.filter(pk=ticket.pk).update(status=Ticket.Status.ESCALATED)
    ApprovalRequest.objects.filter(ticket_ref=ticket.pk).update(status=ApprovalRequest.Status.DENIED)
    ticket.refresh_from_db()
    ticket_refund_propose(ticket=ticket, user=user("acme-support"), amount="20.00", reason="One scratch.")
    # and a draft under which delivered orders are no longer refundable (a rule a person may waive)
    run("policy_draft", "--tenant", "acme", "--name", "v5-processed", "--set", "full_refund_statuses=processed")

    # when it is replayed
    lines = run("replay_policy", "--tenant", "acme", "--draft", "v5-processed")

    # then the plain proposal flips (the person would have been refused), the exception does not:
    # under the draft it would have gone outside the status rule too, which the result counts
    result = PolicyReplay.objects.get(draft__version="v5-processed").result
    assert result["sources"]["proposal"] == {
        "decisions": 2,
        "flipped": 1,
        "directions": {"refund -> escalate": 1},
        "waivers_widened": 1,
    }
    flips = {(f["ticket"], f["source"], tuple(f["codes_after"])) for f in result["flipped_tickets"]}
    assert (ticket.pk, "proposal", ("status_not_eligible",)) in flips
    assert not any(flip[0] == decided["ORD-5002"].pk for flip in flips)
    assert any(text.startswith("  waiving a rule more") and text.endswith(" 1") for text in lines)


def test_a_replay_with_proposals_writes_nothing_but_its_own_record(excepted):
    # given the exception's order cancelled since, and a draft with a 1-day window
    Order.objects.filter(tenant__slug="acme", external_id="ORD-5002").update(status="cancelled")
    run("policy_draft", "--tenant", "acme", "--name", "v5-strict", "--set", "window_days=1")
    before = written_elsewhere()

    # when the draft is replayed
    line = summary(run("replay_policy", "--tenant", "acme", "--draft", "v5-strict"))

    # then only the replay was written; the exception was decided on its recorded facts (delivered, window waived)
    assert written_elsewhere() == before
    assert (line["decisions"], line["flipped"]) == ("4", "2")  # the agent's two refunds
    result = PolicyReplay.objects.get(draft__version="v5-strict").result
    assert result["sources"]["proposal"]["flipped"] == 0


def test_proposal_records_and_their_replays_are_tenant_scoped(excepted, decided, user):
    # given globex support's proposal on its own escalated ticket
    ticket = decided["ORD-7001"]
    Ticket.objects.filter(pk=ticket.pk).update(status=Ticket.Status.ESCALATED)
    ApprovalRequest.objects.filter(ticket_ref=ticket.pk).update(status=ApprovalRequest.Status.DENIED)
    ticket.refresh_from_db()
    ticket_refund_propose(ticket=ticket, user=user("globex-support"), amount="30.00", reason="Half: one pen leaked.")
    globex = DecisionRecord.objects.get(ticket_ref=ticket.pk, source=DecisionRecord.Source.PROPOSAL)
    assert globex.tenant.slug == "globex" and globex.proposed_by == user("globex-support")

    # when each tenant replays a copy of its policy
    run("policy_draft", "--tenant", "globex", "--name", "globex-same")
    run("policy_draft", "--tenant", "acme", "--name", "acme-same")
    run("replay_policy", "--tenant", "globex", "--draft", "globex-same")
    run("replay_policy", "--tenant", "acme", "--draft", "acme-same")

    # then each counts only its own proposals
    sources = {
        replay.tenant.slug: replay.result["sources"]
        for replay in PolicyReplay.objects.filter(draft__version__in=["globex-same", "acme-same"])
    }
    assert sources["globex"]["proposal"]["decisions"] == 1 and sources["globex"]["agent"]["decisions"] == 1
    assert sources["acme"]["proposal"]["decisions"] == 1 and sources["acme"]["agent"]["decisions"] == 3
    assert list(DecisionRecord.objects.for_tenant(globex.tenant).filter(source="proposal")) == [globex]


def test_the_replay_page_counts_agent_decisions_and_proposals_apart(excepted, decided, user):
    # given a replay of a draft that makes the window unwaivable (the exception on ORD-5002 flips)
    run("policy_draft", "--tenant", "acme", "--name", "v5-no-window-exceptions", "--set", "waivable_rules=order_status")
    run("replay_policy", "--tenant", "acme", "--draft", "v5-no-window-exceptions")
    replay = PolicyReplay.objects.get(draft__version="v5-no-window-exceptions")

    # when finance opens its page in the admin
    finance = Client()
    finance.force_login(user("acme-finance"))
    page = finance.get(f"/admin/approvals/policyreplay/{replay.pk}/change/").content.decode()

    # then the agent's three decisions and the one proposal are counted apart, and the flipped row says whose
    assert re.search(r'id="ra-replay-source-agent"><th>Agent decisions</th><td>3, 0 flipped<', page)
    assert re.search(r'id="ra-replay-source-proposal"><th>People&rsquo;s proposals</th><td>1, 1 flipped', page)
    row = page.split(f'href="/tickets/{decided["ORD-5002"].pk}/"', 1)[1].split("</tr>", 1)[0]
    assert "a person&rsquo;s proposal" in row and "outside_window" in row
