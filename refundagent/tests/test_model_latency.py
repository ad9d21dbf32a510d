"""A provider outage longer than AGENT_PROVIDER_OUTAGE_SECONDS ends the run `failed` with a reason
a person can read, and the sweep runs the ticket again once the provider is back; Redis down
leaves the model-call caps open instead of stopping every run."""

import re

from refundagent.agent.loop import agent_run_ticket
from refundagent.agent.model_slots import model_slot
from refundagent.models import AgentRun, Ticket
from refundagent.sweep import tickets_provider_outage_rerun
from refundagent.tests.fake_anthropic import PlannedReplies


def test_a_long_outage_fails_the_ticket_readably_and_the_sweep_runs_it_again(
    file_ticket, fake_anthropic, settings, django_capture_on_commit_callbacks
):
    # given a provider that answers 529 overloaded to everything, asking for 0.2 s each time
    fake_anthropic.responder = PlannedReplies(rate_limited=lambda body: True, retry_after="0.2")
    settings.AGENT_PROVIDER_OUTAGE_SECONDS = 1
    ticket = file_ticket(hold_agent=True)
    # when the run meets the outage
    run = agent_run_ticket(ticket_id=ticket.pk, provider=fake_anthropic.provider(max_retries=0))
    # then it waited for a second, then failed with a readable reason, nothing decided
    ticket.refresh_from_db()
    run.refresh_from_db()
    assert ticket.status == Ticket.Status.FAILED
    assert re.match(
        r"The model provider was unavailable for \d+ s \(\d+ attempts; last: anthropic 429", ticket.stop_detail
    )
    assert "Nothing was decided; the ticket runs again when the provider is back" in ticket.stop_detail
    assert run.state["provider_outage"] is True and run.iterations == 0
    assert not hasattr(run, "draft") or run.draft is None
    # and the sweep leaves it alone while the provider may still be out
    settings.AGENT_PROVIDER_RERUN_SECONDS = 3600
    assert tickets_provider_outage_rerun() == 0
    # when the wait is over (the provider is back: the offline one here), the sweep runs it again
    settings.AGENT_PROVIDER_RERUN_SECONDS = 0
    with django_capture_on_commit_callbacks(execute=True):
        assert tickets_provider_outage_rerun() == 1
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.APPROVAL_REQUIRED
    assert AgentRun.objects.filter(ticket=ticket).count() == 2
    # and a ticket that failed for another reason is never run again by it
    assert tickets_provider_outage_rerun() == 0


def test_a_provider_error_that_waiting_cannot_fix_fails_at_once(file_ticket, fake_anthropic, settings):
    # given a 400 invalid request (the retries cannot fix it)
    fake_anthropic.add_invalid_request("messages: bad shape")
    ticket = file_ticket(hold_agent=True)
    # when the run calls the model, it fails at once, and the sweep does not run it again
    agent_run_ticket(ticket_id=ticket.pk, provider=fake_anthropic.provider(max_retries=0))
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.FAILED
    assert ticket.stop_detail.startswith("The model provider failed: anthropic 400")
    settings.AGENT_PROVIDER_RERUN_SECONDS = 0
    assert tickets_provider_outage_rerun() == 0


def test_the_caps_hold_across_callers_and_a_full_one_waits(settings):
    # given a cap of one call per tenant on Redis
    settings.AGENT_MODEL_SLOTS_REDIS_URL = (
        settings.CELERY_BROKER_URL if settings.CELERY_BROKER_URL.startswith("redis://") else "redis://127.0.0.1:6379/7"
    )
    settings.AGENT_MODEL_CONCURRENCY_PER_TENANT = 1
    settings.AGENT_MODEL_CONCURRENCY = 10
    import threading
    import time

    from refundagent.agent.model_slots import model_slots_in_use

    order = []

    def call(name):
        with model_slot(tenant_id=990001) as waited:
            order.append((name, "in", round(waited, 1)))
            time.sleep(0.5)
            order.append((name, "out", 0))

    # when two calls of the same tenant come at once
    threads = [threading.Thread(target=call, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    time.sleep(0.2)
    in_use = model_slots_in_use(tenant_id=990001)
    for t in threads:
        t.join()
    # then one waited for the other: never both in
    assert in_use == 1
    assert [step for _, step, _ in order] == ["in", "out", "in", "out"]
    assert order[2][2] >= 0.3


def test_redis_down_leaves_the_caps_open(settings, caplog):
    # given the slots' Redis unreachable
    settings.AGENT_MODEL_SLOTS_REDIS_URL = "redis://127.0.0.1:1/0"
    # when a run asks for a slot, it calls the model without one, and says so
    with model_slot(tenant_id=1) as waited:
        assert waited < 3
    assert "calling the model without a slot" in caplog.text


def test_the_planned_model_answers_the_reply_check_as_a_real_one_would(file_ticket, fake_anthropic, settings, caplog):
    # given the benchmarks' planned model, and the reply's second check on (as with a key)
    fake_anthropic.responder = planned = PlannedReplies()
    settings.REPLY_MODEL_CHECK = True
    settings.ANTHROPIC_API_KEY = "test-key"
    settings.ANTHROPIC_BASE_URL = fake_anthropic.url
    ticket = file_ticket(hold_agent=True)
    # when the agent works the ticket
    agent_run_ticket(ticket_id=ticket.pk, provider=fake_anthropic.provider(max_retries=0))
    # then the check is one more call, without tools, answered NO: the draft waits for finance
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.APPROVAL_REQUIRED
    checks = [body for body in fake_anthropic.bodies if not body.get("tools")]
    assert len(checks) == 1 and "<draft_reply>" in checks[0]["messages"][0]["content"]
    assert "reply model check unavailable" not in caplog.text
    # and the run counts the check's tokens and cost with its turns': every token the model billed
    run = AgentRun.objects.get(ticket=ticket)
    billed = planned.usage_total
    assert (run.input_tokens, run.output_tokens) == (billed["input_tokens"], billed["output_tokens"])
    assert run.cache_read_input_tokens == billed["cache_read_input_tokens"]
    assert run.iterations == len(fake_anthropic.bodies) - 1  # the check is not a turn
