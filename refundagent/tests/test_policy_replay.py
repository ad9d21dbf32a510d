"""Replay before you publish (docs/replay.md): a draft policy decides the recorded gate decisions
of the last days again; the result says what flips and what it does to the money, and a draft is
published only after a replay of exactly that draft, or with a written reason."""

import io
import re
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command

from approvals.models import (
    ApprovalRequest,
    ApprovalVote,
    DecisionRecord,
    PolicyPublication,
    PolicyReplay,
    RefundPolicy,
)
from ledger.models import Order, RefundEntry, Tenant
from refundagent.agent.loop import agent_run_ticket
from refundagent.agent.providers.offline import OfflineProvider
from refundagent.models import AgentRun, RefundDraft, Ticket, TraceEvent

SUMMARY = re.compile(
    r"^replay draft=(?P<draft>\S+) decisions=(?P<decisions>\d+) flipped=(?P<flipped>\d+) "
    r"allowed_before=(?P<before>\S+) allowed_after=(?P<after>\S+) difference=(?P<difference>\S+)$"
)


@pytest.fixture
def ticket_defaults():
    return {"order": "ORD-5001", "message": "It arrived broken. Please refund me."}


@pytest.fixture
def decided(file_ticket):
    """Recorded decisions of acme: ORD-5001 (120.00, 12 days old), ORD-5003 (50.00, 5 days),
    ORD-5006 (750.00, 6 days, two approvers) go to finance; ORD-5002 (45 days) was escalated;
    and globex's ORD-7001 (60.00, 3 days) went to its finance."""
    tickets = {}
    for order in ("ORD-5001", "ORD-5003", "ORD-5006", "ORD-5002"):
        tickets[order] = file_ticket(order=order)
    tickets["ORD-7001"] = file_ticket(order="ORD-7001", username="globex-support", customer="CUST-2001")
    for ticket in tickets.values():
        agent_run_ticket(ticket_id=ticket.pk, provider=OfflineProvider())
    return tickets


def run(command, *args):
    out = io.StringIO()
    call_command(command, *args, stdout=out)
    return out.getvalue().strip().splitlines()


def summary(lines) -> dict:
    match = SUMMARY.match(lines[-1])
    assert match, lines[-1]
    return match.groupdict()


def written_elsewhere() -> tuple:
    """Row counts (and the newest update) of everything a replay must never write."""
    return (
        Ticket.objects.count(),
        list(Ticket.objects.order_by("pk").values_list("status", "updated_at")),
        AgentRun.objects.count(),
        RefundDraft.objects.count(),
        TraceEvent.objects.count(),
        ApprovalRequest.objects.count(),
        list(ApprovalRequest.objects.order_by("pk").values_list("status", "updated_at")),
        ApprovalVote.objects.count(),
        RefundEntry.objects.count(),
        DecisionRecord.objects.count(),
        list(RefundPolicy.objects.order_by("pk").values_list("status", "version")),
    )


def test_a_draft_that_shortens_the_window_flips_exactly_the_older_tickets_and_their_money(decided):
    # given a draft of acme's policy with a 7-day window instead of 30
    assert run("policy_draft", "--tenant", "acme", "--name", "refund-policy-v5", "--set", "window_days=7") == [
        "refund-policy-v5"
    ]
    draft = RefundPolicy.objects.get(tenant__slug="acme", version="refund-policy-v5")
    assert draft.status == "draft" and draft.window_days == 7
    assert RefundPolicy.objects.current_for(draft.tenant).version == "refund-policy-v4"

    # when it is replayed over the last 30 days
    lines = run("replay_policy", "--tenant", "acme", "--draft", "refund-policy-v5")

    # then only ORD-5001 (12 days old) flips, refund -> escalate, and the money drops by its allowed 120.00
    line = summary(lines)
    assert line == {
        "draft": "refund-policy-v5",
        "decisions": "4",
        "flipped": "1",
        "before": "920.00",
        "after": "800.00",
        "difference": "-120.00",
    }
    replay = PolicyReplay.objects.get(draft=draft)
    flipped = replay.result["flipped_tickets"]
    assert [(f["ticket"], f["order"], f["before"], f["after"]) for f in flipped] == [
        (decided["ORD-5001"].pk, "ORD-5001", "approval_required", "escalated")
    ]
    allowed = DecisionRecord.objects.get(ticket_ref=decided["ORD-5001"].pk).allowed_amount
    assert Decimal(line["difference"]) == -sum(Decimal(f["allowed_before"]) for f in flipped) == -allowed
    assert replay.result["directions"] == {"refund -> escalate": 1}
    assert replay.result["rules"]["outside_window"] == {"before": 0, "after": 1}
    assert any(f"{decided['ORD-5001'].pk}" in text and "ORD-5001" in text for text in lines[:-1])


def test_a_lower_dual_control_threshold_is_reported_as_newly_needed(decided):
    # given a draft whose two-approver threshold is 100.00 instead of 500.00
    run("policy_draft", "--tenant", "acme", "--name", "v5-threshold", "--set", "two_approver_threshold=100")

    # when it is replayed
    lines = run("replay_policy", "--tenant", "acme", "--draft", "v5-threshold")

    # then nothing flips, but ORD-5001's 120.00 now needs two approvers (ORD-5003, 50.00, does not;
    # ORD-5006 needed two already)
    assert summary(lines)["flipped"] == "0"
    replay = PolicyReplay.objects.get(draft__version="v5-threshold")
    assert replay.result["dual_control_newly_needed"] == 1
    assert any(line.startswith("dual control newly needed") and line.endswith(" 1") for line in lines)


def test_a_replay_writes_nothing_but_its_own_record(decided):
    # given recorded decisions, and an order that changed since (ORD-5003 was cancelled)
    run(
        "policy_draft",
        "--tenant",
        "acme",
        "--name",
        "v5-strict",
        "--set",
        "window_days=1",
        "--set",
        "full_refund_statuses=delivered",
    )
    Order.objects.filter(tenant__slug="acme", external_id="ORD-5003").update(status="cancelled")
    before = written_elsewhere()
    replays = PolicyReplay.objects.count()

    # when the draft is replayed (the command, and the Celery task the admin page enqueues)
    lines = run("replay_policy", "--tenant", "acme", "--draft", "v5-strict")
    from approvals.replay import policy_replay_create
    from approvals.tasks import policy_replay_task

    queued = policy_replay_create(tenant=Tenant.objects.get(slug="acme"), draft_version="v5-strict", days=30)
    policy_replay_task.delay(queued.pk)

    # then the replays are the only rows written; the recorded facts (delivered) were replayed, not today's order
    assert written_elsewhere() == before
    assert PolicyReplay.objects.count() == replays + 2
    queued.refresh_from_db()
    assert queued.status == "done" and queued.done == queued.total == 4
    assert summary(lines)["flipped"] == "3"  # every refund is now outside a 1-day window
    assert queued.result["rules"].get("status_not_eligible", {"after": 0})["after"] == 0


def test_replays_are_tenant_scoped(decided):
    # given a draft of globex's policy with a 1-day window (ORD-7001 is 3 days old)
    run("policy_draft", "--tenant", "globex", "--name", "globex-v5", "--set", "window_days=1")
    run("policy_draft", "--tenant", "acme", "--name", "acme-v5", "--set", "window_days=1")

    # when globex replays it, and someone names acme's draft for globex or globex's for acme
    line = summary(run("replay_policy", "--tenant", "globex", "--draft", "globex-v5"))
    with pytest.raises(CommandError, match="no policy acme-v5"):
        run("replay_policy", "--tenant", "globex", "--draft", "acme-v5")
    with pytest.raises(CommandError, match="no policy globex-v5"):
        run("replay_policy", "--tenant", "acme", "--draft", "globex-v5")
    with pytest.raises(CommandError, match="no policy acme-v5"):
        run("publish_policy", "--tenant", "globex", "--name", "acme-v5", "--without-replay", "urgent")

    # then globex's replay saw only globex's one decision, and acme's none of globex's
    assert line["decisions"] == "1" and line["flipped"] == "1" and line["before"] == "60.00"
    acme = summary(run("replay_policy", "--tenant", "acme", "--draft", "acme-v5"))
    assert acme["decisions"] == "4" and "60.00" not in (acme["before"], acme["after"])
    assert not PolicyReplay.objects.filter(tenant__slug="globex", draft__tenant__slug="acme").exists()


def test_publishing_without_a_replay_is_refused_and_nothing_changes(decided):
    # given a draft that was never replayed
    run("policy_draft", "--tenant", "acme", "--name", "refund-policy-v5", "--set", "window_days=14")
    policies = list(RefundPolicy.objects.order_by("pk").values_list("version", "status"))

    # when someone publishes it
    with pytest.raises(CommandError, match="no replay of exactly this draft"):
        run("publish_policy", "--tenant", "acme", "--name", "refund-policy-v5")

    # then nothing changed: v4 is current, v5 a draft, no publication recorded
    assert list(RefundPolicy.objects.order_by("pk").values_list("version", "status")) == policies
    assert not PolicyPublication.objects.exists()


def test_a_draft_edited_after_its_replay_is_refused_until_replayed_again(decided):
    # given a replayed draft that was then edited (a wider window)
    run("policy_draft", "--tenant", "acme", "--name", "refund-policy-v5", "--set", "window_days=7")
    run("replay_policy", "--tenant", "acme", "--draft", "refund-policy-v5")
    draft = RefundPolicy.objects.get(tenant__slug="acme", version="refund-policy-v5")
    draft.window_days = 60
    draft.save()

    # when it is published, it is refused: the replay is of another draft
    with pytest.raises(CommandError, match="changed since its last replay"):
        run("publish_policy", "--tenant", "acme", "--name", "refund-policy-v5")
    draft.refresh_from_db()
    assert draft.status == "draft"

    # and once replayed again, it is published after that replay
    run("replay_policy", "--tenant", "acme", "--draft", "refund-policy-v5")
    assert run("publish_policy", "--tenant", "acme", "--name", "refund-policy-v5")[-1].startswith(
        "refund-policy-v5 is now the current policy of acme (after replay #"
    )
    publication = PolicyPublication.objects.get(policy=draft)
    assert publication.replay.draft_fingerprint and publication.replay.result["decisions"] == 4
    assert RefundPolicy.objects.current_for(draft.tenant) == draft


def test_an_operator_may_publish_without_a_replay_with_a_written_reason_which_is_kept(decided):
    run("policy_draft", "--tenant", "acme", "--name", "refund-policy-v5", "--set", "window_days=14")
    with pytest.raises(CommandError):
        run("publish_policy", "--tenant", "acme", "--name", "refund-policy-v5", "--without-replay", "   ")

    lines = run(
        "publish_policy", "--tenant", "acme", "--name", "refund-policy-v5", "--without-replay", "Regulator deadline"
    )

    assert "without a replay: Regulator deadline" in lines[-1]
    publication = PolicyPublication.objects.get(policy__version="refund-policy-v5")
    assert publication.replay is None and publication.without_replay_reason == "Regulator deadline"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--set", "window_days=-3"], "window_days"),
        (["--set", "window_days=1e3"], "window_days"),
        (["--set", "full_refund_statuses=delivered,lost"], "lost"),
        (["--set", "two_approver_threshold=1e3"], "two_approver_threshold"),
        (["--set", "approvals_above_threshold=0"], "approvals_above_threshold"),
        (["--set", "colour=red"], "colour"),
        (["--set", "window_days"], "FIELD=VALUE"),
        (["--from", "refund-policy-v9"], "no policy refund-policy-v9"),
        (["--name", "refund-policy-v4"], "already has a policy"),
        (["--set", "text=Refunds\x00within 7 days."], "NUL"),
        (["--set", "two_approver_threshold_currency=usd"], "ISO currency"),
        (["--set", "threshold_rates=EUR:abc"], "threshold_rates"),
        (["--name", "v5\x00"], "printable"),
    ],
)
def test_bad_drafts_are_refused_and_write_nothing(demo, args, message):
    policies = RefundPolicy.objects.count()
    name = [] if "--name" in args else ["--name", "v5"]
    with pytest.raises(CommandError, match=message):
        run("policy_draft", "--tenant", "acme", *name, *args)
    assert RefundPolicy.objects.count() == policies


def test_bad_replay_windows_are_refused(demo):
    run("policy_draft", "--tenant", "acme", "--name", "v5")
    for days in ("0", "-1", "100000"):
        with pytest.raises(CommandError, match="--days"):
            run("replay_policy", "--tenant", "acme", "--draft", "v5", "--days", days)
    with pytest.raises(CommandError, match="only drafts"):
        run("replay_policy", "--tenant", "acme", "--draft", "refund-policy-v4")
    assert not PolicyReplay.objects.exists()


def test_backfilled_records_replay_where_their_facts_allow_and_say_where_not(file_ticket):
    import importlib

    from django.apps import apps as django_apps

    # given a whole-order refund and an item refund decided, then backfilled (as on a deployment
    # that had drafts before records were kept: the migration rebuilds one from each draft)
    whole = file_ticket(order="ORD-5001")
    items = file_ticket(order="ORD-5006", items=["ITEM-7"], message="The espresso machine leaks.")
    for ticket in (whole, items):
        agent_run_ticket(ticket_id=ticket.pk, provider=OfflineProvider())
    importlib.import_module("refundagent.migrations.0010_decision_records_backfill").backfill(django_apps, None)
    assert DecisionRecord.objects.filter(backfilled=True).count() == 2
    run("policy_draft", "--tenant", "acme", "--name", "v5-one-day", "--set", "window_days=1")

    # when a draft with a 1-day window is replayed
    line = summary(run("replay_policy", "--tenant", "acme", "--draft", "v5-one-day"))

    # then the live records and the backfilled whole-order refund flip; the backfilled item refund
    # (its lines were not kept) is left as decided and counted as not replayable
    replay = PolicyReplay.objects.get(draft__version="v5-one-day")
    assert (line["decisions"], line["flipped"]) == ("4", "3")
    assert replay.result["backfilled"] == 2 and replay.result["not_replayable"] == 1
    flipped = {(f["order"], f["ticket"]) for f in replay.result["flipped_tickets"]}
    assert flipped == {("ORD-5001", whole.pk), ("ORD-5006", items.pk)}


def test_the_summary_gives_amounts_per_currency_where_there_are_several():
    from approvals.replay import policy_replay_summary

    replay = PolicyReplay(
        draft=RefundPolicy(version="v5"),
        result={
            "decisions": 3,
            "flipped": 1,
            "allowed_before": {"EUR": "40.00", "USD": "120.00"},
            "allowed_after": {"EUR": "40.00", "USD": "0.00"},
            "difference": {"EUR": "0.00", "USD": "-120.00"},
        },
    )
    assert policy_replay_summary(replay) == (
        "replay draft=v5 decisions=3 flipped=1 allowed_before=EUR:40.00,USD:120.00 "
        "allowed_after=EUR:40.00,USD:0.00 difference=EUR:0.00,USD:-120.00"
    )
