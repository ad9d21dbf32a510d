"""A provider outage is visible: while a run waits out 429/529 answers, its ticket page, the
page's poll and the trace say since when, and the run counts as waiting (the operations page's
figure: evals/tests/test_operations_provider_waits.py); once the provider answers, none of them
does. A mark left by a worker that died mid-wait is not a wait."""

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from refundagent.agent import loop
from refundagent.models import AgentRun, Ticket
from refundagent.selectors import runs_waiting_on_provider
from refundagent.tests.test_loop_anthropic import run, script_investigation, ticket  # noqa: F401 (fixture)

WAITING = "Waiting on the model provider since"


def run_waiting(running, *, lease_left: timedelta, waited: timedelta) -> AgentRun:
    """The ticket running, its run marked waiting on the provider for `waited`, its lease ending
    in `lease_left` (negative: a worker that died mid-wait)."""
    now = timezone.now()
    Ticket.objects.filter(pk=running.pk).update(status=Ticket.Status.RUNNING)
    return AgentRun.objects.create(
        ticket=running,
        status=AgentRun.Status.RUNNING,
        provider="anthropic",
        claimed_by="a-worker",
        lease_expires_at=now + lease_left,
        provider_waiting_since=now - waited,
    )


@pytest.fixture
def watch(user, monkeypatch):
    """What a support person sees each time the run pauses for the provider (the
    real pause runs after the look)."""
    support = Client()
    support.force_login(user("acme-support"))
    seen = []

    def look(ticket_id):
        return {
            "page": support.get(reverse("ticket", args=[ticket_id])).content.decode(),
            "poll": support.get(reverse("ticket_status", args=[ticket_id])).json(),
            "api": support.get(f"/api/tickets/{ticket_id}").json(),
            "waiting": runs_waiting_on_provider().count(),
        }

    pause = loop._Loop.pause

    def pause_and_look(self, seconds):
        seen.append(look(self.ticket.pk))
        pause(self, seconds)

    monkeypatch.setattr(loop._Loop, "pause", pause_and_look)
    watch = type("Watch", (), {})()
    watch.seen, watch.look = seen, look
    return watch


def test_the_ticket_shows_it_waits_on_the_provider_while_it_answers_529_and_not_after(ticket, fake_anthropic, watch):  # noqa: F811
    # given a provider that answers overloaded three times (the SDK retries none of them) then works
    for _ in range(3):
        fake_anthropic.add_overloaded(headers={"retry-after": "0.05"})
    script_investigation(fake_anthropic)

    agent_run = run(ticket, fake_anthropic.provider(max_retries=0))

    # while it waited: the page, its poll and the trace said so, the operations page counted it
    assert len(watch.seen) == 3
    first = watch.seen[0]
    assert WAITING in first["page"] and WAITING in first["poll"]["provider_waiting"]
    assert first["poll"]["status"] == "running"
    assert [e["decision"] for e in first["poll"]["events"]][-1] == "provider_wait"
    assert [s["waiting"] for s in watch.seen] == [1, 1, 1]
    # the API's ticket keeps its contract: no new field, no new status
    assert "provider_waiting" not in first["api"] and first["api"]["status"] == "running"
    # one wait, one "since": the later retries did not move it
    since = {s["poll"]["provider_waiting"] for s in watch.seen}
    assert len(since) == 1
    # and once the provider answered, none of them does
    assert ticket.status == Ticket.Status.APPROVAL_REQUIRED, ticket.stop_detail
    assert agent_run.provider_waiting_since is None
    after = watch.look(ticket.pk)
    assert WAITING not in after["page"] and after["poll"]["provider_waiting"] == ""
    assert after["waiting"] == 0
    waits = ticket.trace_events.filter(span="model", decision="provider_wait")
    assert waits.count() == 3 and all(e.data["waiting_since"] for e in waits)


def test_a_run_that_gives_up_on_the_provider_is_no_longer_waiting(ticket, fake_anthropic, watch, settings):  # noqa: F811
    # given an outage longer than the window: the run waits once, then gives up failed
    settings.AGENT_PROVIDER_OUTAGE_SECONDS = 0.3
    for _ in range(2):
        fake_anthropic.add_overloaded(headers={"retry-after": "0.2"})

    agent_run = run(ticket, fake_anthropic.provider(max_retries=0))

    assert len(watch.seen) == 1 and WAITING in watch.seen[0]["page"]
    assert ticket.status == Ticket.Status.FAILED
    assert agent_run.provider_waiting_since is None
    assert WAITING not in watch.look(ticket.pk)["page"]


@pytest.mark.parametrize(
    "lease_left, waited", [(timedelta(seconds=-1), timedelta(seconds=5)), (timedelta(seconds=60), timedelta(hours=1))]
)
def test_a_dead_workers_waiting_mark_is_not_shown(ticket, watch, lease_left, waited):  # noqa: F811
    # given a running run whose worker died mid-wait (its lease lapsed), or whose mark is older
    # than any wait the loop allows
    run_waiting(ticket, lease_left=lease_left, waited=waited)

    seen = watch.look(ticket.pk)

    assert WAITING not in seen["page"] and seen["poll"]["provider_waiting"] == ""
    assert seen["waiting"] == 0


def test_a_task_that_takes_over_a_dead_workers_waiting_run_clears_its_mark(ticket, fake_anthropic):  # noqa: F811
    # given a run whose worker died while it waited on the provider
    dead = run_waiting(ticket, lease_left=timedelta(seconds=-1), waited=timedelta(seconds=5))

    # when another task takes it over (the sweep's redelivery)
    claimed = loop.agent_run_claim(ticket_id=ticket.pk, task_id="the-sweeps-task", provider=fake_anthropic.provider())

    # then it is that run, and it is not waiting until its own model call says so
    run, how = claimed
    assert (run.pk, how) == (dead.pk, "resumed")
    assert run.provider_waiting_since is None
    assert not runs_waiting_on_provider().exists()
