"""The main job end to end: migrate, seed, file the in-window and out-of-window tickets, run
the agent, approve as finance, execute, verify, print the ledger, and run the release gate once
(so the operators' page /evals/ has a run to show)."""

import logging
import re
import time
from io import StringIO

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from approvals.decisions import approval_request_decide
from approvals.models import ApprovalRequest
from ledger.api import order_ledger_serialize
from ledger.exceptions import DomainError
from ledger.selectors import order_get
from refundagent.demo import DEMO_USERS, demo_seed
from refundagent.models import Ticket
from refundagent.services import ticket_create

# What to open after the demo (docs/ui.md): the path and who it is for.
DEMO_PAGES = [
    ("/tickets/", "support: the tickets (acme-support, acme-lead)"),
    ("/queue/", "support: the escalation queue, what a person must finish"),
    (
        "/admin/approvals/approvalrequest/",
        "finance: the review queue (acme-finance, acme-finance2; /admin/ leads there)",
    ),
    ("/evals/", "operators: eval runs and the release gate (ops)"),
    ("/evals/operations/", "operators: the operator dashboard (ops)"),
    ("/api/docs", "the HTTP API's reference (Swagger UI, works offline)"),
]

TICKETS = [
    (
        "ORD-5001",
        "200.00",
        "Hi, the wireless headphones I bought stopped charging after a week. I'd like my money back, "
        "$200 please for the trouble.",
    ),
    (
        "ORD-5002",
        None,
        "The desk lamp flickers. Can I get a refund? I bought it about six weeks ago.",
    ),
]


class Command(BaseCommand):
    help = "Run the whole product end to end on the configured database (the embedded PostgreSQL by default)."

    def handle(self, *args, **options):
        self.step("1. Database")
        if settings.DATABASE_EMBEDDED:
            # The embedded demo database is scratch: every run starts from the same state. A
            # database named by DATABASE_URL is never emptied.
            with connection.cursor() as cursor:
                cursor.execute("DROP SCHEMA public CASCADE")
                cursor.execute("CREATE SCHEMA public")
        call_command("migrate", verbosity=0)
        database = "embedded PostgreSQL, fresh demo database" if settings.DATABASE_EMBEDDED else "PostgreSQL"
        celery = "Celery eager" if settings.CELERY_TASK_ALWAYS_EAGER else "Celery workers"
        self.say(f"{database}; {celery}; provider {settings.AGENT_PROVIDER}")

        self.step("2. Demo data")
        try:
            demo_seed()
        except DomainError as exc:  # e.g. a demo username taken by another tenant's user
            raise CommandError(exc.message) from exc
        self.say("tenants acme and globex, refund-policy-v4 (30-day window, two approvers above 500.00)")

        User = get_user_model()
        support = User.objects.get(username="acme-support")
        finance = User.objects.get(username="acme-finance")

        self.step("3. Support files two tickets; the agent investigates each")
        tickets = []
        for order, amount, message in TICKETS:
            ticket = ticket_create(
                user=support, order=order, customer="CUST-1001", message=message, requested_amount=amount
            )
            ticket.refresh_from_db()
            tickets.append(ticket)
            self.show_ticket(ticket)

        self.step("4. Finance approves the one exact refund the gate allowed")
        for ticket in tickets:
            request = ApprovalRequest.objects.filter(ticket_ref=ticket.pk).order_by("-id").first()
            if request is None:
                self.say(f"ticket #{ticket.pk} ({ticket.order.external_id}): no approval request — {ticket.status}")
                continue
            self.say(
                f"acme-finance approves request #{request.pk}: {request.amount} {request.currency} "
                f"to {request.args.get('destination')} for {request.order.external_id} (hash {request.args_hash[:12]}…)"
            )
            approval_request_decide(
                request_id=request.pk,
                user=finance,
                decision="approve",
                args_hash=request.args_hash,
                note="Checked against the order and refund-policy-v4.",
            )
            request.refresh_from_db()
            ticket.refresh_from_db()
            verdict = (request.verification or {}).get("ok")
            self.say(f"executed: ledger entry #{request.ledger_entry_id}; evaluator verdict ok={verdict}")
            self.say(f"ticket #{ticket.pk} is now {ticket.status}")

        self.step("5. The ledger")
        tenant = support.membership.tenant
        for order in ("ORD-5001", "ORD-5002"):
            ledger = order_ledger_serialize(order_get(tenant=tenant, external_id=order))
            self.say(
                f"{order}: total {ledger['total']} {ledger['currency']}, refunded {ledger['refunded_total']}, "
                f"still refundable {ledger['refundable']}"
            )
            for entry in ledger["entries"]:
                self.say(
                    f"   refund #{entry['refund_id']}: {entry['amount']} {entry['currency']} {entry['status']} "
                    f"key={entry['idempotency_key']} approval={entry['approval']}"
                )
            if not ledger["entries"]:
                self.say("   no refunds")

        final = {t.order.external_id: Ticket.objects.get(pk=t.pk).status for t in tickets}
        gate_passed = self.release_gate()
        ok = (
            final.get("ORD-5001") == Ticket.Status.REFUNDED
            and final.get("ORD-5002") == Ticket.Status.ESCALATED
            and gate_passed
        )
        self.sign_in_and_look()
        self.step("Done" if ok else "Unexpected outcome")
        self.say(", ".join(f"{order}: {status}" for order, status in final.items()))
        if not ok:
            raise SystemExit(1)

    def sign_in_and_look(self):
        """7. Who can sign in (password `demo`, or $DEMO_PASSWORD) and the pages to open."""
        self.step("7. Sign in and look: .venv/bin/python manage.py runserver, then http://127.0.0.1:8000")
        self.say("users (password: the demo password, 'demo' unless DEMO_PASSWORD is set):")
        for tenant, users in DEMO_USERS.items():
            for username, roles in users:
                self.say(f"   {username}: {', '.join(roles)} ({tenant})")
        self.say("   ops: operator, superuser (acme)")
        self.say("pages:")
        for path, what in DEMO_PAGES:
            self.say(f"   {path:<36} {what}")

    def release_gate(self) -> bool:
        """6. The release gate, once: the release_gate suite with the offline provider, through
        the evals' own command (named, not imported: evals sits above this app)."""
        self.step("6. The release gate (release_gate suite, offline provider)")
        out, err = StringIO(), StringIO()
        started = time.monotonic()
        # Each case approves and executes in its own sandbox: its money log lines are the cases',
        # not the demo's, so they stay out of the demo's output.
        money_log = logging.getLogger("money")
        level = money_log.level
        money_log.setLevel(logging.WARNING)
        try:
            call_command("run_evals", suite="release_gate", provider="offline", stdout=out, stderr=err)
            passed = True
        except CommandError:
            passed = False
        finally:
            money_log.setLevel(level)
        text = out.getvalue()
        metrics = dict(re.findall(r"^(pass_rate|false_allow|results)=(\S+)$", text, re.M))
        run = re.search(r"^run=(\d+)", text, re.M)
        self.say(
            f"eval run #{run.group(1) if run else '?'}: {metrics.get('results', '?')} cases, pass rate "
            f"{metrics.get('pass_rate', '?')}, false allows {metrics.get('false_allow', '?')}, "
            f"gate {'passed' if passed else 'FAILED'} in {time.monotonic() - started:.1f}s; see /evals/"
        )
        for line in err.getvalue().splitlines():
            if line.startswith("gate:"):
                self.say("   " + line)
        return passed

    def show_ticket(self, ticket: Ticket):
        self.say(
            f"ticket #{ticket.pk} {ticket.order.external_id} asking {ticket.requested_amount or '-'}: {ticket.status}"
        )
        if ticket.stop_detail:
            self.say(f"   why: {ticket.stop_detail}")
        draft = ticket.drafts.order_by("-id").first()
        if draft:
            self.say(
                f"   draft: {draft.recommendation} {draft.amount or ''} citing {draft.policy_version or '(nothing)'}"
            )
            self.say(f"   reply draft (not sent): {draft.customer_reply[:160]}")
        request = ApprovalRequest.objects.filter(ticket_ref=ticket.pk).order_by("-id").first()
        if request:
            self.say(
                f"   approval request #{request.pk}: {request.amount} {request.currency}, "
                f"{request.required_approvals} approver(s), expires {request.expires_at:%Y-%m-%d %H:%M}"
            )
        trace = list(ticket.trace_events.order_by("seq").values_list("span", "decision"))
        self.say("   trace: " + " → ".join(f"{span}:{decision}" if decision else span for span, decision in trace))

    def step(self, title: str):
        self.stdout.write(self.style.MIGRATE_HEADING(title))

    def say(self, text: str):
        self.stdout.write("  " + text)
