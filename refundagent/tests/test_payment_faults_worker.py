"""Faults on the real parts: PostgreSQL, a private Redis this test starts and stops (never the
shared one), real Celery workers, and the real `stripe` SDK against the local fake Stripe server.

- The broker is down when finance approves: 200; once it is back the sweep re-enqueues the
  execution and a worker pays it exactly once.
- The broker is down when support files a ticket: 201; the sweep has a worker pick it up.
- The whole worker is SIGKILLed after the provider made the refund and before the ledger
  recorded it: the sweep (not Redis's visibility timeout, an hour here) has a new worker finish
  it, and the provider holds exactly one refund.
"""

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from approvals.models import ApprovalRequest
from approvals.services.decisions import approval_request_decide
from approvals.tasks import approval_execute_task
from ledger.models import RefundEntry
from ledger.tests.fake_stripe import FakeStripe, payments_follow_ledger
from refundagent.models import Ticket
from refundagent.sweep import outbox_sweep_task
from refundagent.tests.payments_support import ticket_awaiting_approval
from tests.helpers import wait_for

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

FAULTS = Path(__file__).parent / "faults"
PAYOUT_CRASH_ENV = "PAYOUT_CRASH_AFTER_PROVIDER_CALL_MARKER"
app = approval_execute_task.app  # the product's Celery app (tests never import the wiring)


def free_port() -> int:
    """A port nothing listens on now, picked at run time: other test runs share this machine."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class PrivateRedis:
    """This test's own Redis, started and stopped by it, on a port picked at run time."""

    def __init__(self, port: int, workdir: Path):
        self.port, self.workdir, self.proc = port, workdir, None
        self.url = f"redis://127.0.0.1:{port}/0"

    def start(self):
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if (
                subprocess.run(
                    ["redis-cli", "-p", str(self.port), "ping"], capture_output=True, text=True
                ).stdout.strip()
                == "PONG"
            ):
                return self
            time.sleep(0.1)
        raise RuntimeError("the private redis-server did not start")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()  # as abrupt as an outage
            self.proc.wait(timeout=10)


def app_use_broker(url: str):
    """Point this process's Celery app at `url`, dropping pooled connections to the old one
    (Celery reads CELERY_BROKER_URL from the environment before its own setting, and another
    test may have pinned the read/write URLs)."""
    os.environ["CELERY_BROKER_URL"] = url
    app.conf.broker_url = app.conf.broker_write_url = app.conf.broker_read_url = url
    app._pool = None  # dropped, not closed: kombu's shared pools may still hand its connections out
    app.amqp._producer_pool = None


@pytest.fixture
def private_redis(tmp_path):
    previous = os.environ["CELERY_BROKER_URL"]
    redis = PrivateRedis(free_port(), tmp_path).start()
    app_use_broker(redis.url)
    yield redis
    redis.stop()
    app_use_broker(previous)


@pytest.fixture
def stripe_env(settings):
    server = FakeStripe().start()
    stop_following = payments_follow_ledger(server)
    env = {
        "PAYMENT_GATEWAY": "stripe",
        "STRIPE_API_KEY": "sk_test_fake",
        "STRIPE_API_BASE": server.url,
        "STRIPE_MAX_NETWORK_RETRIES": "2",
        "STRIPE_TIMEOUT_SECONDS": "10",
    }
    settings.PAYMENT_GATEWAY, settings.STRIPE_API_KEY, settings.STRIPE_API_BASE = "stripe", "sk_test_fake", server.url
    yield server, env
    stop_following()
    server.stop()


@pytest.fixture
def shop(policy, make_order, make_user):
    return {
        "order": make_order("100.00", external_id="ORD-FAULT", payment_ref="pi_fault"),
        "support": make_user("support", "support"),
        "finance": make_user("finance", "finance"),
    }


def request_status(request) -> str:
    return ApprovalRequest.objects.filter(pk=request.pk).values_list("status", flat=True).get()


def test_broker_down_when_finance_approves_then_the_sweep_pays_it_exactly_once(
    celery_worker_process, private_redis, stripe_env, shop, api_client, settings
):
    fake, env = stripe_env
    settings.SWEEP_GRACE_SECONDS = 1
    celery_worker_process.start(timeout=90, extra_env={**env, "CELERY_BROKER_URL": private_redis.url})
    ticket, request = ticket_awaiting_approval(order=shop["order"], filer=shop["support"], amount="40.00", key="k-down")

    # given the broker goes down
    private_redis.stop()
    # when finance approves: the decision is recorded and answered 200
    started = time.monotonic()
    response = api_client(shop["finance"]).post(
        f"/api/approvals/{request.pk}/decision",
        {"decision": "approve", "args_hash": request.args_hash},
        content_type="application/json",
    )
    assert response.status_code == 200, response.content
    assert time.monotonic() - started < 10  # the failed publish does not hang the request
    request.refresh_from_db()
    assert request.status == "approved" and request.dispatch_error and not fake.posts()

    # when the broker is back and the sweep runs after the grace
    private_redis.start()
    time.sleep(settings.SWEEP_GRACE_SECONDS + 0.1)
    assert outbox_sweep_task()["approval_executions"] == 1

    # then the worker pays it, exactly once
    wait_for(lambda: request_status(request) == "executed", 60, "the worker to execute the swept request")
    assert len(fake.refunds) == 1 and len(fake.posts()) == 1
    assert RefundEntry.objects.filter(order=shop["order"]).count() == 1
    assert RefundEntry.objects.get(order=shop["order"]).status == "succeeded"
    assert Ticket.objects.get(pk=ticket.pk).status == Ticket.Status.REFUNDED


def test_broker_down_when_support_files_a_ticket_then_the_sweep_has_it_run(
    celery_worker_process, private_redis, api_client, settings
):
    settings.SWEEP_GRACE_SECONDS = 1
    support = api_client("acme-support")  # seeds the demo
    celery_worker_process.start(
        timeout=90, extra_env={"CELERY_BROKER_URL": private_redis.url, "AGENT_PROVIDER": "offline"}
    )
    # given the broker goes down; when support files a ticket: 201, queued
    private_redis.stop()
    response = support.post(
        "/api/tickets",
        {"order": "ORD-5001", "customer": "CUST-1001", "message": "Broken, refund $200.", "requested_amount": "200.00"},
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    ticket_id = response.json()["id"]
    assert Ticket.objects.get(pk=ticket_id).status == Ticket.Status.QUEUED

    # when the broker is back and the sweep runs after the grace
    private_redis.start()
    time.sleep(settings.SWEEP_GRACE_SECONDS + 0.1)
    assert outbox_sweep_task()["tickets_queued"] == 1
    # then a worker picks it up and the agent stops it once
    wait_for(
        lambda: Ticket.objects.get(pk=ticket_id).status == Ticket.Status.APPROVAL_REQUIRED,
        90,
        "the agent to run the swept ticket",
    )


def test_worker_killed_between_the_provider_call_and_the_ledger_update_pays_once(
    money_worker_process, private_redis, stripe_env, shop, tmp_path, settings, django_capture_on_commit_callbacks
):
    fake, env = stripe_env
    settings.SWEEP_GRACE_SECONDS = 1
    # given a worker (visibility timeout: an hour) whose first payout is killed, whole worker,
    # after the provider made the refund and before the ledger recorded it
    marker = tmp_path / "killed-after-provider-call"
    pythonpath = os.pathsep.join(p for p in (str(FAULTS), os.environ.get("PYTHONPATH", "")) if p)
    worker_env = {**env, "CELERY_BROKER_URL": private_redis.url, "CELERY_VISIBILITY_TIMEOUT": "3600"}
    money_worker_process.start(
        timeout=90, extra_env={**worker_env, PAYOUT_CRASH_ENV: str(marker), "PYTHONPATH": pythonpath}
    )
    ticket, request = ticket_awaiting_approval(order=shop["order"], filer=shop["support"], amount="40.00", key="k-kill")

    # when finance approves
    with django_capture_on_commit_callbacks(execute=True):
        approval_request_decide(
            request_id=request.pk, user=shop["finance"], decision="approve", args_hash=request.args_hash
        )
    wait_for(marker.exists, 60, "the worker to be killed after the provider call")
    wait_for(lambda: money_worker_process.proc.poll() is not None, 30, "the whole worker to be gone")
    # then the provider made the refund, the ledger still says pending, the request approved
    assert len(fake.refunds) == 1
    assert RefundEntry.objects.get(order=shop["order"]).status == "pending"
    assert request_status(request) == "approved"

    # when a worker is back (same hour-long visibility timeout) and the sweep runs after the grace
    money_worker_process.start(timeout=90, extra_env=worker_env)
    time.sleep(settings.SWEEP_GRACE_SECONDS + 0.1)
    swept_at = time.monotonic()
    assert outbox_sweep_task()["approval_executions"] == 1

    # then the execution finishes within seconds (not an hour): the same key got the same refund
    wait_for(lambda: request_status(request) == "executed", 60, "the swept execution")
    assert time.monotonic() - swept_at < 60
    assert len(fake.refunds) == 1
    assert {c["idempotency_key"] for c in fake.posts()} == {request.idempotency_key}
    [entry] = RefundEntry.objects.filter(order=shop["order"])
    assert entry.status == "succeeded" and entry.provider_ref == next(iter(fake.refunds))
    assert Ticket.objects.get(pk=ticket.pk).status == Ticket.Status.REFUNDED
