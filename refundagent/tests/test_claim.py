"""The agent's claim: the ticket's move to running and the run it starts commit together. The
run exists only if the move matched, the move stands only if the run was written, and of two
claims racing on one ticket exactly one starts a run."""

import threading

import pytest
from django.db import IntegrityError, connection

from refundagent.agent.loop import agent_run_claim
from refundagent.agent.providers.scripted import ScriptedProvider
from refundagent.models import AgentRun, Ticket


def _queued_ticket():
    """A queued ticket made directly (filing one would run the agent on commit)."""
    from django.contrib.auth import get_user_model

    from ledger.models import Order

    order = Order.objects.get(tenant__slug="acme", external_id="ORD-5001")
    return Ticket.objects.create(
        tenant=order.tenant,
        order=order,
        customer=order.customer,
        message="Broken.",
        currency=order.currency,
        created_by=get_user_model().objects.get(username="acme-support"),
    )


@pytest.mark.django_db
def test_a_claim_moves_the_ticket_and_starts_its_run_in_one_transaction(demo):
    # given a queued ticket
    ticket = _queued_ticket()

    # when a task claims it
    statements = []
    with connection.execute_wrapper(lambda execute, sql, *rest: statements.append(sql) or execute(sql, *rest)):
        claimed = agent_run_claim(ticket_id=ticket.pk, task_id="task-1", provider=ScriptedProvider([]))

    # then the ticket runs and the run is held by the task
    run, how = claimed
    assert how == "claimed"
    assert AgentRun.objects.get(pk=run.pk).claimed_by == "task-1"
    assert Ticket.objects.get(pk=ticket.pk).status == Ticket.Status.RUNNING
    # and the move and the run were written between one savepoint and its release (the test's
    # transaction stands for the claim's own): they commit together
    kinds = [sql.split()[0] for sql in statements]
    assert kinds == ["SAVEPOINT", "UPDATE", "INSERT", "RELEASE"], statements
    assert "refundagent_ticket" in statements[1] and "refundagent_agentrun" in statements[2]


@pytest.mark.django_db
def test_a_run_that_cannot_be_written_leaves_the_ticket_queued(demo):
    # given a queued ticket that still has an open run (one the database refuses to double)
    ticket = _queued_ticket()
    AgentRun.objects.create(ticket=ticket, status=AgentRun.Status.RUNNING, provider="scripted", claimed_by="old")

    # when a task claims it, the run's insert fails
    with pytest.raises(IntegrityError):
        agent_run_claim(ticket_id=ticket.pk, task_id="task-1", provider=ScriptedProvider([]))

    # then the ticket's move rolled back with it: still queued, with its one old run
    assert Ticket.objects.get(pk=ticket.pk).status == Ticket.Status.QUEUED
    assert list(AgentRun.objects.filter(ticket=ticket).values_list("claimed_by", flat=True)) == ["old"]


@pytest.mark.django_db
@pytest.mark.parametrize("status", [Ticket.Status.ESCALATED, Ticket.Status.CLOSED, Ticket.Status.APPROVAL_REQUIRED])
def test_a_ticket_that_is_not_queued_starts_no_run(demo, status):
    # given a ticket a person already took out of the queue
    ticket = _queued_ticket()
    Ticket.objects.filter(pk=ticket.pk).update(status=status)

    # when a task tries to claim it
    claimed = agent_run_claim(ticket_id=ticket.pk, task_id="task-1", provider=ScriptedProvider([]))

    # then nothing is claimed and no run row was written
    assert claimed is None
    assert not AgentRun.objects.filter(ticket_id=ticket.pk).exists()
    assert Ticket.objects.get(pk=ticket.pk).status == status


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("round_", range(3))
def test_of_two_racing_claims_exactly_one_starts_a_run(round_):
    from refundagent.demo import demo_seed

    # given a queued ticket, and two tasks released at the same moment (a redelivered message)
    demo_seed()
    ticket = _queued_ticket()
    barrier = threading.Barrier(2)
    results: dict[str, object] = {}

    def claim(task_id: str):
        try:
            barrier.wait()
            results[task_id] = agent_run_claim(ticket_id=ticket.pk, task_id=task_id, provider=ScriptedProvider([]))
        except Exception as exc:  # noqa: BLE001 - reported below
            results[task_id] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=claim, args=(f"task-{n}",)) for n in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)

    # then one claim started the ticket's one run; the other got nothing (its lease is not expired)
    assert not any(t.is_alive() for t in threads)
    won = [task for task, result in results.items() if isinstance(result, tuple)]
    assert len(won) == 1, results
    assert [r for r in results.values() if not isinstance(r, tuple)] == [None]
    run = AgentRun.objects.get(ticket_id=ticket.pk)
    assert run.claimed_by == won[0]
    assert Ticket.objects.get(pk=ticket.pk).status == Ticket.Status.RUNNING
