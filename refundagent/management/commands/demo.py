"""The main job end to end: migrate, seed, file the in-window and out-of-window tickets, run
the agent, approve as finance, execute, record the payout finance made by hand (the manual
gateway), verify, send the customer replies (and print where the email was written), print the
ledger, file one ticket from an email to the support inbox, and run the release gate once (so the operators' page /evals/ has a run to show)."""

import logging
import re
import time
from io import StringIO
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from approvals.models import ApprovalRequest
from approvals.services.decisions import approval_request_decide
from approvals.services.execution import approval_execute
from ledger.api import order_ledger_serialize
from ledger.exceptions import DomainError
from ledger.models import RefundEntry, RefundStatus
from ledger.selectors import order_get
from ledger.services import ledger_refund_record_paid
from refundagent.demo import DEMO_USERS, demo_inbox_email, demo_seed
from refundagent.models import Ticket, TicketReply
from refundagent.replies_send import ticket_reply_send
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
            entry = request.ledger_entry
            self.say(
                f"ledger entry #{request.ledger_entry_id}: {entry.status if entry else '-'} "
                f"({entry.gateway if entry else '-'}); ticket #{ticket.pk} is now {ticket.status}"
            )
            if entry is not None and entry.gateway == "manual" and entry.status == RefundStatus.PENDING:
                # The manual gateway: finance pays by hand, then records it, as a person would in the
                # admin's review page or with POST /api/refunds/{id}/paid.
                reference = f"DEMO-TRF-{entry.pk:05d}"
                ledger_refund_record_paid(entry_id=entry.pk, tenant=entry.tenant, reference=reference, user=finance)
                approval_execute(request_id=request.pk)  # what the worker does next; a repeat changes nothing
                request.refresh_from_db()
                ticket.refresh_from_db()
                self.say(
                    f"acme-finance paid it by hand and recorded the payout (reference {reference}): entry "
                    f"{RefundEntry.objects.get(pk=entry.pk).status}"
                )
            verdict = (request.verification or {}).get("ok")
            self.say(f"evaluator verdict ok={verdict}; ticket #{ticket.pk} is now {ticket.status}")

        self.step("5. Support sends the replies (once the outcome is true)")
        for ticket in tickets:
            ticket.refresh_from_db()
            try:
                reply, _ = ticket_reply_send(ticket_id=ticket.pk, user=support)
            except DomainError as exc:
                self.say(f"ticket #{ticket.pk} ({ticket.status}): not sent: {exc.message}")
                continue
            reply = TicketReply.objects.get(pk=reply.pk)
            self.say(f"ticket #{ticket.pk} ({reply.outcome}): reply to {reply.to} {reply.status}")
            self.say(f"   {reply.text[:160]}")
            self.say(f"   {self.email_written(reply)}")

        self.step("6. The ledger")
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

        emailed = self.inbox_email()
        final = {t.order.external_id: Ticket.objects.get(pk=t.pk).status for t in tickets}
        gate_passed = self.release_gate()
        ok = (
            final.get("ORD-5001") == Ticket.Status.REFUNDED
            and final.get("ORD-5002") == Ticket.Status.ESCALATED
            and gate_passed
            and emailed
        )
        self.sign_in_and_look()
        self.step("Done" if ok else "Unexpected outcome")
        self.say(", ".join(f"{order}: {status}" for order, status in final.items()))
        if not ok:
            raise SystemExit(1)

    def sign_in_and_look(self):
        """8. Who can sign in (password `demo`, or $DEMO_PASSWORD) and the pages to open."""
        self.step("8. Sign in and look: .venv/bin/python manage.py runserver, then http://127.0.0.1:8000")
        self.say("users (password: the demo password, 'demo' unless DEMO_PASSWORD is set):")
        for tenant, users in DEMO_USERS.items():
            for username, roles in users:
                self.say(f"   {username}: {', '.join(roles)} ({tenant})")
        self.say("   ops: operator, superuser (acme)")
        self.say("pages:")
        for path, what in DEMO_PAGES:
            self.say(f"   {path:<36} {what}")

    def inbox_email(self) -> bool:
        """6b. A customer writes to the support inbox: one ticket from one email (docs/inbox.md)."""
        self.step("6b. Jane writes to acme's support inbox; the email becomes a ticket")
        result = demo_inbox_email()
        ticket = Ticket.objects.get(pk=result.ticket.pk)
        self.say(
            f"email to {ticket.tenant.inbox_address.address} from {result.message.sender}: ticket #{ticket.pk} "
            f"(source {ticket.source}, customer {ticket.customer.external_id if ticket.customer_id else '-'}, "
            f"order {ticket.order.external_id if ticket.order_id else 'to be found by the agent'}): {ticket.status}"
        )
        for message in ticket.messages.all():
            self.say(
                f"   {message.direction} {message.sender} {message.at:%H:%M:%S}: {message.text.splitlines()[0][:100]}"
            )
        if ticket.stop_detail:
            self.say(f"   why: {ticket.stop_detail}")
        return ticket.source == Ticket.Source.EMAIL and ticket.customer_id is not None

    def release_gate(self) -> bool:
        """7. The release gate, once: the release_gate suite with the offline provider, through
        the evals' own command (named, not imported: evals sits above this app)."""
        self.step("7. The release gate (release_gate suite, offline provider)")
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

    def email_written(self, reply: TicketReply) -> str:
        """Where the message went: the file the embedded default wrote, or the configured backend."""
        if reply.status != TicketReply.Status.SENT:
            return f"delivery {reply.status} by the worker ({settings.EMAIL_BACKEND})"
        if settings.EMAIL_BACKEND.endswith("filebased.EmailBackend"):
            folder = Path(settings.EMAIL_FILE_PATH)
            written = [path for path in folder.glob("*.log") if reply.message_id in path.read_text(errors="replace")]
            if written:
                return f"email written to {max(written, key=lambda path: path.stat().st_mtime)}"
            return f"email written under {folder}"
        return f"email sent through {settings.EMAIL_BACKEND} (Message-ID {reply.message_id})"

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
