"""Run one eval case in a sandbox that is rolled back afterwards.

Why a rolled-back transaction (and not a long-lived eval tenant): every case starts from
exactly its own data and nothing else — no earlier case's refunds, no real tenant's orders —
and leaves nothing behind, so a run can be repeated any number of times with the same result
and the scheduled run can share a database with real tenants. Inside the transaction the
case gets a scratch tenant, staff users, its policy and only the orders it needs (importing
the whole τ-bench shop per case would be far too slow). `transaction.on_commit` callbacks
never fire inside it, so the runner drives the pipeline itself, synchronously: the agent loop
(instead of the Celery task `ticket_create` would enqueue), finance's approval and the
approval's execution and verification. The evidence is graded and copied out (observed
outcome + trace) before the rollback; the EvalResult is written after it.
"""

import json
import logging
import time
from copy import deepcopy
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction
from django.utils import timezone

from approvals import gate
from approvals.models import ApprovalRequest, Capability, RefundPolicy
from approvals.services.decisions import approval_request_decide
from approvals.services.execution import approval_execute
from approvals.services.policies import refund_policy_retire
from ledger.exceptions import DomainError
from ledger.importing import orders_import
from ledger.models import Membership, Order, RefundEntry, RefundStatus, Tenant
from ledger.selectors import order_refunded_total
from ledger.services import ledger_refund_record_paid
from ledger.tenancy import roles_sync
from refundagent.agent.loop import agent_run_ticket
from refundagent.agent.providers.registry import provider_get
from refundagent.agent.providers.scripted import ScriptedProvider
from refundagent.demo import policy_publish_demo
from refundagent.models import Ticket
from refundagent.services import ticket_create
from refundagent.tracing import trace_export

from . import graders
from .tau import tau_policy_publish

logger = logging.getLogger(__name__)

SANDBOX_TENANT = "eval-sandbox"
SANDBOX_OTHER_TENANT = "eval-sandbox-other"


class _Rollback(Exception):
    """Raised at the end of every case to roll its sandbox back."""


@dataclass
class CaseOutcome:
    passed: bool
    observed: dict
    failures: list[str]
    trace_id: str = ""
    trace: list = field(default_factory=list)
    grade: dict = field(default_factory=dict)
    duration_ms: int = 0


@dataclass
class CaseSpec:
    """The parts of an EvalCase the runner needs (an EvalCase row or a case dict)."""

    name: str
    ticket_input: dict
    fixture: dict
    expected: dict
    provider_script: list | dict | None = None
    tags: list = field(default_factory=list)

    @classmethod
    def of(cls, case) -> "CaseSpec":
        if isinstance(case, dict):
            return cls(
                name=case["name"],
                ticket_input=case["ticket_input"],
                fixture=case["fixture"],
                expected=case["expected"],
                provider_script=case.get("provider_script"),
                tags=case.get("tags", []),
            )
        return cls(
            name=case.name,
            ticket_input=case.ticket_input,
            fixture=case.fixture,
            expected=case.expected,
            provider_script=case.provider_script,
            tags=case.tags,
        )


# --- the sandbox ------------------------------------------------------------------------------


def _import_format(fixture: dict, slug: str, now: datetime) -> dict:
    """The case's shop as the ledger's import format, in the sandbox tenant, dated from now."""
    data = {"tenant": slug, "customers": deepcopy(fixture.get("customers", [])), "orders": []}
    for order in fixture.get("orders", []):
        order = deepcopy(order)
        days = order.pop("placed_days_ago", None)
        if days is not None:
            order["placed_at"] = (now - timedelta(days=days)).isoformat()
        data["orders"].append(order)
    return data


def _policy_install(tenant: Tenant, kind: str | None) -> RefundPolicy | None:
    if kind in (None, "none"):
        return None
    if kind == "tau":
        return tau_policy_publish(tenant)
    policy = policy_publish_demo(tenant)
    if kind == "retired":
        refund_policy_retire(tenant=tenant)
        return None
    return policy


SANDBOX_STAFF = (("support", ["support"]), ("finance", ["finance"]), ("finance2", ["finance"]))


def _sandbox_staff(tenant: Tenant) -> dict:
    """The case's support and finance users, made in a few bulk queries (this runs per case).
    The role groups are the product's own (ledger.tenancy.roles_sync), made if missing."""
    groups = {g.name: g for g in Group.objects.filter(name__in=["support", "finance"])}
    if len(groups) < 2:
        groups = {role: synced.group for role, synced in roles_sync().items()}
    User = get_user_model()
    users = []
    for suffix, roles in SANDBOX_STAFF:
        user = User(
            username=f"{tenant.slug}-{suffix}", email=f"{suffix}@{tenant.slug}.example", is_staff="finance" in roles
        )
        user.set_unusable_password()
        users.append(user)
    users = User.objects.bulk_create(users)
    if any(u.pk is None for u in users):  # backends that do not return ids from bulk inserts
        users = list(User.objects.filter(username__in=[u.username for u in users]).order_by("id"))
    Membership.objects.bulk_create(Membership(user=u, tenant=tenant) for u in users)
    User.groups.through.objects.bulk_create(
        User.groups.through(user_id=u.pk, group_id=groups[role].pk)
        for u, (_, roles) in zip(users, SANDBOX_STAFF, strict=True)
        for role in roles
    )
    return {suffix: u for u, (suffix, _) in zip(users, SANDBOX_STAFF, strict=True)}


def sandbox_build(fixture: dict, *, now: datetime) -> dict:
    """The case's world: tenants, staff, policy, customers and orders (and switched-off capabilities)."""
    tenant = Tenant.objects.create(slug=SANDBOX_TENANT, name="Eval sandbox")
    staff = _sandbox_staff(tenant)
    _policy_install(tenant, fixture.get("policy", "demo"))
    orders_import(data=_import_format(fixture, tenant.slug, now))
    tenants = [tenant]
    other = fixture.get("other_tenant")
    if other:
        other_tenant = Tenant.objects.create(slug=SANDBOX_OTHER_TENANT, name="Eval sandbox (another tenant)")
        _policy_install(other_tenant, other.get("policy", "demo"))
        orders_import(data=_import_format(other, other_tenant.slug, now))
        tenants.append(other_tenant)
    if fixture.get("capabilities_off"):
        Capability.objects.filter(name__in=fixture["capabilities_off"]).update(enabled=False)
    return {
        "tenant": tenant,
        "tenants": tenants,
        "support": staff["support"],
        "finance": [staff["finance"], staff["finance2"]],
    }


# --- providers --------------------------------------------------------------------------------


def provider_for_case(spec: CaseSpec, provider_name: str):
    if spec.provider_script is not None:
        return ScriptedProvider.from_json(deepcopy(spec.provider_script))
    return provider_get(provider_name)


# --- one case -----------------------------------------------------------------------------------


def case_execute(case, *, provider_name: str = "offline", judge=None) -> CaseOutcome:
    """Run one case in its sandbox and grade it. Never raises for a failing case."""
    spec = CaseSpec.of(case)
    started = time.monotonic()
    box: dict = {}
    try:
        with transaction.atomic():
            _case_in_sandbox(spec, provider_name, box, judge)
            raise _Rollback
    except _Rollback:
        pass
    except Exception as exc:  # noqa: BLE001 - a crashing case is a failed case, not a crashed run
        logger.exception("eval case %s crashed", spec.name)
        box.setdefault("evidence", {})["crash"] = f"{type(exc).__name__}: {exc}"
        box["grade"] = graders.Grade(passed=False, failures=[f"the case crashed: {type(exc).__name__}: {exc}"])
    grade: graders.Grade = box["grade"]
    evidence = box.get("evidence", {})
    trace = evidence.pop("trace", [])
    return CaseOutcome(
        passed=grade.passed,
        observed=evidence,
        failures=grade.failures,
        trace_id=evidence.get("ticket", {}).get("trace_id", ""),
        trace=trace,
        grade=grade.as_dict(),
        duration_ms=int((time.monotonic() - started) * 1000),
    )


def _case_in_sandbox(spec: CaseSpec, provider_name: str, box: dict, judge) -> None:
    now = timezone.now()
    sandbox = sandbox_build(spec.fixture, now=now)
    tenant_ids = [t.pk for t in sandbox["tenants"]]
    evidence: dict = {"provider": provider_name}
    box["evidence"] = evidence
    ticket_input = spec.ticket_input
    message = ticket_input["message"]
    # The order the case is about: the ticket's, or on a customer-level ticket the one the agent
    # must find (None: no order of the customer is right, e.g. a model reaching for another's).
    expected_order = ticket_input.get("order") or ticket_input.get("expected_order")
    expected_items = list(ticket_input.get("items") or ticket_input.get("expected_items") or [])
    order_id, items = ticket_input.get("order"), ticket_input.get("items") or []
    if provider_name == "anthropic" and ticket_input.get("instruction"):
        # A real model gets only the customer's words and must find the order and the items
        # among the customer's orders itself (a customer-level ticket). The filing form's
        # refund destination and amount stay: they are the customer's choice, not the order's.
        message, order_id, items = ticket_input["instruction"], None, []

    try:
        ticket = ticket_create(
            user=sandbox["support"],
            order=order_id,
            customer=ticket_input["customer"],
            message=message,
            requested_amount=ticket_input.get("requested_amount"),
            items=items,
            refund_to=ticket_input.get("refund_to"),
        )
    except DomainError as exc:
        evidence["ticket_error"] = exc.code
        evidence["ticket_error_detail"] = exc.message
        evidence["tickets_written"] = Ticket.objects.filter(tenant_id__in=tenant_ids).count()
        evidence["approvals"] = graders.evidence_approvals(tenant_ids=tenant_ids)
        evidence["entries_before_approval"] = []
        box["grade"] = graders.case_grade(expected=spec.expected, evidence=evidence)
        if evidence["tickets_written"]:
            box["grade"].failures.append("a refused ticket still wrote a ticket")
            box["grade"].passed = False
        return

    order = ticket.order or Order.objects.filter(tenant=ticket.tenant, external_id=expected_order).first()
    policy = gate.policy_current(ticket.tenant)
    evidence["policy_current"] = policy.version if policy else None
    if order is not None:
        evidence["order"] = {
            "external_id": order.external_id,
            "total": str(order.total),
            "currency": order.currency,
            "status": order.status,
        }
        evidence["refundable"] = graders.refundable_independent(
            order=order, policy=policy, item_ids=list(ticket.items) or expected_items, now=now
        )
    entries_before = set(RefundEntry.objects.filter(tenant_id__in=tenant_ids).values_list("pk", flat=True))

    provider = provider_for_case(spec, provider_name)
    agent_run_ticket(ticket_id=ticket.pk, provider=provider)

    ticket.refresh_from_db()
    evidence["ticket"] = {
        "id": ticket.pk,
        "status": ticket.status,
        "stop_reason": ticket.stop_reason,
        "stop_detail": ticket.stop_detail,
        "trace_id": str(ticket.trace_id),
        "filed_order": order_id,
        "order": ticket.order.external_id if ticket.order_id else None,
    }
    evidence["model"] = getattr(provider, "model", "")
    evidence["draft"] = graders.evidence_draft(ticket)
    evidence["approvals"] = graders.evidence_approvals(tenant_ids=tenant_ids)
    evidence["entries_before_approval"] = [
        e for e in graders.evidence_ledger(tenant_ids) if e["id"] not in entries_before
    ]
    evidence["other_people"] = graders.evidence_people(ticket_customer_id=ticket.customer_id, tenant_ids=tenant_ids)
    evidence["transcript"] = json.dumps([r.messages for r in ticket.runs.all()], default=str)

    want = spec.expected.get("approval_amount")
    pending = [a for a in evidence["approvals"] if a["status"] == ApprovalRequest.Status.PENDING]
    if want is not None and len(pending) == 1:
        evidence["execution"] = _approve_and_execute(pending[0]["id"], order, sandbox, tenant_ids, entries_before)
        ticket.refresh_from_db()
        evidence["execution"]["ticket_status"] = ticket.status

    evidence["trace"] = trace_export(ticket)["events"]
    if judge is not None and evidence.get("draft"):
        evidence["judge"] = judge(evidence)
    grade = graders.case_grade(expected=spec.expected, evidence=evidence)
    box["grade"] = grade
    # The transcript was graded; it is large, keep only its size in the stored outcome.
    evidence["transcript"] = f"{len(evidence['transcript'])} characters"


def _approve_and_execute(request_id: int, order: Order, sandbox: dict, tenant_ids, entries_before) -> dict:
    """Finance approves (two people when the request needs two) and the runtime executes once,
    synchronously; executing a second time must write nothing (a redelivered task)."""
    result: dict = {"refunded_before": str(order_refunded_total(order))}
    try:
        request = ApprovalRequest.objects.get(pk=request_id)
        for approver in sandbox["finance"][: request.required_approvals]:
            request = approval_request_decide(
                request_id=request_id,
                user=approver,
                decision="approve",
                args_hash=request.args_hash,
                note="eval: approved as shown",
            )
        approval_execute(request_id=request_id)
        # The manual gateway: finance pays by hand and records it, as a person would; the next
        # execution verifies it (and must write nothing).
        entry = RefundEntry.objects.filter(idempotency_key=request.idempotency_key).first()
        if entry is not None and entry.gateway == "manual" and entry.status == RefundStatus.PENDING:
            ledger_refund_record_paid(
                entry_id=entry.pk, tenant=entry.tenant, reference=f"EVAL-TRF-{entry.pk}", user=sandbox["finance"][0]
            )
        count = RefundEntry.objects.filter(tenant_id__in=tenant_ids).count()
        approval_execute(request_id=request_id)
        result["replay_new_entries"] = RefundEntry.objects.filter(tenant_id__in=tenant_ids).count() - count
    except DomainError as exc:
        result["error"] = f"{exc.code}: {exc.message}"
    request = ApprovalRequest.objects.get(pk=request_id)
    result["status"] = request.status
    result["verification"] = request.verification
    result["entries"] = [e for e in graders.evidence_ledger(tenant_ids) if e["id"] not in entries_before]
    result["refunded_after"] = str(order_refunded_total(order))
    return result
