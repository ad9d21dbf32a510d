"""The release gate's optional replay suite (docs/replay.md): run_evals --replay-tenant replays the
tenant's recorded tickets in shadow and fails when the agreement is below
EVAL_REPLAY_AGREEMENT_MIN."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from evals.cases import release_gate_cases
from refundagent.agent.loop import agent_run_ticket
from refundagent.agent.providers.offline import OfflineProvider
from refundagent.models import ModelReplay
from tests.factories import refund_draft


@pytest.fixture
def recorded(file_ticket):
    """acme tickets the offline agent decided: refunds of 120.00 (ORD-5001) and 50.00 (ORD-5003)."""
    for order in ("ORD-5001", "ORD-5003"):
        ticket = file_ticket(order=order, message="It arrived broken. Please refund me.")
        agent_run_ticket(ticket_id=ticket.pk, provider=OfflineProvider())


def run_evals(*args):
    out, err = StringIO(), StringIO()
    call_command("run_evals", "--case", release_gate_cases()[0]["name"], *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_the_replay_suite_passes_when_the_shadow_agrees_enough(recorded, settings):
    settings.EVAL_REPLAY_AGREEMENT_MIN = "1.00"

    out, _ = run_evals("--replay-tenant", "acme")

    assert "replay_agreement=1.0 " in out and "gate=passed" in out
    assert ModelReplay.objects.get().result["tickets"] == 2


def test_the_replay_suite_fails_the_gate_below_the_threshold(recorded, settings, monkeypatch):
    # given a model that drafts 50.00 whatever the ticket: it agrees on ORD-5003 only (1 of 2)
    monkeypatch.setenv("AGENT_SCRIPT", json.dumps([refund_draft("ORD-5001", amount="50.00")]))
    settings.EVAL_REPLAY_AGREEMENT_MIN = "0.90"

    with pytest.raises(CommandError, match="agrees on 1 of 2"):
        run_evals("--replay-tenant", "acme", "--replay-provider", "scripted")

    # and at a threshold it meets, the same replay passes
    settings.EVAL_REPLAY_AGREEMENT_MIN = "0.50"
    out, _ = run_evals("--replay-tenant", "acme", "--replay-provider", "scripted")
    assert "replay_agreement=0.5 " in out and "gate=passed" in out
