"""The support web UI: thin views over the ticket services and the tenant-scoped selectors.

Every view resolves the caller's tenant first; anything of another tenant is a 404, a role
that may not do something gets the 403 page with the reason, and a domain error is shown to
the user (as a form error or a message), never as a 500.
"""

from functools import wraps

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Q
from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from approvals.schemas import approval_serialize
from ledger.api import order_ledger_serialize
from ledger.exceptions import DomainError, Forbidden, NotFound
from ledger.selectors import order_refund_position
from ledger.tenancy import tenant_for_user, user_require_access, user_roles

from . import selectors
from .forms import (
    CUSTOMER_ID_MAX,
    CloseForm,
    CustomerQueryForm,
    EscalateForm,
    NoteForm,
    ProposalForm,
    QueueFilterForm,
    TicketFilterForm,
    TicketForm,
)
from .labels import label
from .models import QUEUE_STATUSES, Ticket
from .replies_send import ticket_reply_send
from .services import ticket_assign, ticket_close, ticket_create, ticket_escalate
from .ticket_state import ticket_transition_allowed
from .tracing import trace_export

PAGE_SIZE = 20
# While a ticket is in one of these states something is still happening: the page polls.
ACTIVE = {Ticket.Status.QUEUED, Ticket.Status.RUNNING, Ticket.Status.APPROVED}
# The admin review queue (approvals/admin/review_queue.py) where finance decides approval requests.
REVIEW_QUEUE_URL = "/admin/approvals/approvalrequest/"


def forbidden(request, reason: str):
    return render(request, "403.html", {"reason": reason, "roles": getattr(request, "roles", set())}, status=403)


def tenant_view(view=None, *, needs: str = "tickets.read"):
    """Login required; sets `request.tenant` and `request.roles`; maps domain errors once.

    Every page of this UI shows tickets (customer messages, card digits), so each checks the
    role its page `needs` by the rule the API checks (ledger/tenancy.py ROLE_RULES) before the
    view runs; a member of the tenant without that role gets the 403 page."""
    if view is None:
        return lambda view: tenant_view(view, needs=needs)

    @login_required
    @wraps(view)
    def wrapper(request, *args, **kwargs):
        try:
            request.tenant = tenant_for_user(request.user)
            request.roles = user_roles(request.user)
            user_require_access(request.user, needs)
            return view(request, *args, **kwargs)
        except NotFound as exc:
            raise Http404(exc.message) from None
        except Forbidden as exc:
            return forbidden(request, exc.message)

    return wrapper


def _ticket_get(request, pk: int) -> Ticket:
    return selectors.ticket_get(tenant=request.tenant, ticket_id=pk)


def _status_payload(ticket: Ticket, since: int = 0) -> dict:
    events = [e for e in trace_export(ticket)["events"] if e["seq"] > since]
    return {
        "id": ticket.pk,
        "status": ticket.status,
        "status_label": label(ticket.status, "ticket_status"),
        "stop_reason_label": label(ticket.stop_reason, "stop_reason"),
        "stop_reason": ticket.stop_reason,
        "stop_detail": ticket.stop_detail,
        "active": ticket.status in ACTIVE,
        "provider_waiting": _provider_waiting_text(selectors.ticket_provider_waiting_since(ticket)),
        "updated_at": ticket.updated_at.isoformat(),
        "events": [{k: v for k, v in e.items() if k != "data"} for e in events],
    }


def _provider_waiting_text(since) -> str:
    """The ticket page's line while its run waits out the model provider's 429/529 answers."""
    if since is None:
        return ""
    return f"Waiting on the model provider since {timezone.localtime(since):%Y-%m-%d %H:%M:%S %Z} (it answers busy; the run retries)."


def _filters_read(filters) -> tuple[dict, bool]:
    """A list page's filters: what they ask for, and whether the form refused them. A refused
    filter lists nothing (400, the error shown): never every ticket under a filter box that still
    names the filter."""
    if filters.is_valid():
        return filters.cleaned_data, False
    return {}, filters.is_bound


@tenant_view
@require_GET
def ticket_list(request):
    filters = TicketFilterForm(request.GET or None)
    wanted, refused = _filters_read(filters)
    tickets = selectors.ticket_list(tenant=request.tenant, status=wanted.get("status") or None)
    if q := (wanted.get("q") or "").strip():
        tickets = tickets.filter(Q(order__external_id__icontains=q) | Q(customer__external_id__icontains=q))
    if refused:
        tickets = tickets.none()
    page = Paginator(tickets, PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "refundagent/ticket_list.html",
        {"page": page, "filters": filters, "query": query.urlencode(), "roles": request.roles, "nav": "tickets"},
        status=400 if refused else 200,
    )


def _typed_customer(request) -> tuple[str, list | None]:
    """The customer typed on the new-ticket form and their payment methods, for its "refund to"
    picker; None when none is typed or the tenant has no such customer (another tenant's
    customer reads exactly so)."""
    customer = (request.POST.get("customer") or "").strip()
    if not customer or len(customer) > CUSTOMER_ID_MAX:
        return customer, None
    return customer, selectors.customer_methods(tenant=request.tenant, customer=customer)


def _methods_note(customer: str, methods) -> str:
    if not customer:
        return "Type the customer first: their payment methods are then offered."
    if methods is None:
        return f"Customer {customer} not found: only the original payment method can be picked."
    return f"The payment methods of customer {customer}."


@tenant_view(needs="tickets.file")
def ticket_new(request):
    customer, methods = _typed_customer(request)
    if request.method == "POST" and "show_methods" in request.POST:
        # Without the script: the typed customer's methods into the picker. Nothing is filed and
        # nothing refused yet; what was typed stays in the form.
        form = TicketForm(initial=request.POST.dict(), methods=methods, customer=customer)
        context = {"form": form, "methods_note": _methods_note(customer, methods), "roles": request.roles, "nav": "new"}
        return render(request, "refundagent/ticket_new.html", context)
    form = TicketForm(request.POST or None, methods=methods, customer=customer)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            ticket = ticket_create(
                user=request.user,
                order=data["order"],
                customer=data["customer"],
                message=data["message"],
                requested_amount=data["requested_amount"],
                items=data["items"],
                refund_to=data["refund_to"],
            )
        except DomainError as exc:
            form.add_domain_error(exc)
        else:
            # The page itself says whether the agent is still investigating (it polls): a flash
            # saying so would stay above a result that arrived meanwhile.
            ticket.refresh_from_db()
            finished = (
                "" if ticket.status in ACTIVE else f" The agent finished: {label(ticket.status, 'ticket_status')}."
            )
            messages.success(request, f"Ticket #{ticket.pk} filed.{finished}")
            return redirect("ticket", pk=ticket.pk)
    status = 422 if form.errors else 200
    return render(
        request, "refundagent/ticket_new.html", {"form": form, "roles": request.roles, "nav": "new"}, status=status
    )


@tenant_view(needs="tickets.file")
@require_GET
def ticket_new_methods(request):
    """The new-ticket form's "refund to" choices for a typed customer (what ticket_new.js loads
    when the customer field changes): the same picker the form renders. An unknown customer, or
    another tenant's, is a 404 with only the original payment method, the same answer for both."""
    query = CustomerQueryForm(request.GET)
    if not query.is_valid():
        return JsonResponse({"detail": _form_errors(query)}, status=400)
    customer = query.cleaned_data["customer"]
    methods = selectors.customer_methods(tenant=request.tenant, customer=customer)
    choices = TicketForm(methods=methods, customer=customer).fields["refund_to"].choices
    body = {
        "customer": customer,
        "found": methods is not None,
        "choices": [{"value": value, "label": str(text)} for value, text in choices],
        "note": _methods_note(customer, methods),
    }
    return JsonResponse(body, status=200 if methods is not None else 404)


@tenant_view
@require_GET
def ticket_detail(request, pk: int):
    return _ticket_page(request, _ticket_get(request, pk))


def _ticket_page(
    request, ticket: Ticket, *, close_form=None, proposal_form=None, escalate_form=None, status: int = 200
):
    """The ticket page; after a refused close or proposal, with the posted form (its errors at
    their fields and the text typed)."""
    approval = selectors.ticket_approval_latest(ticket)
    draft = selectors.ticket_draft_latest(ticket)
    order = ticket.order
    # A customer-level ticket has no order until the agent's draft names one: nothing to show yet.
    payments = [
        {
            "method": p.get_method_display(),
            "card": f"{p.card_brand} ****{p.card_last4}" if p.card_last4 else "",
            "amount": p.amount,
            "currency": p.currency,
        }
        for p in (order.payments.all() if order is not None else [])
    ]
    trace = trace_export(ticket)
    in_queue = ticket.status in QUEUE_STATUSES
    # No order named: the person who has the ticket picks one of the customer's orders.
    customer_orders = selectors.ticket_customer_orders(ticket) if order is None else None
    return render(
        request,
        "refundagent/ticket_detail.html",
        {
            "ticket": ticket,
            "draft": draft,
            "draft_superseded": _draft_superseded(draft, approval),
            "verdict": draft.gate_verdict if draft else None,
            "approval": approval_serialize(approval) if approval else None,
            "changes_asked": selectors.ticket_changes_asked(ticket, exclude_pk=approval.pk if approval else None),
            "position": order_refund_position(order) if order is not None else None,
            "payments": payments,
            "ledger": order_ledger_serialize(order) if order is not None else None,
            "trace": trace,
            "last_seq": trace["events"][-1]["seq"] if trace["events"] else 0,
            "active": ticket.status in ACTIVE,
            "provider_waiting": _provider_waiting_text(selectors.ticket_provider_waiting_since(ticket)),
            # The buttons the transition table allows; the services decide again on submit.
            "can_escalate": ticket_transition_allowed(ticket=ticket, to=Ticket.Status.ESCALATED),
            "can_close": ticket_transition_allowed(ticket=ticket, to=Ticket.Status.CLOSED),
            "note_form": NoteForm(),
            "escalate_form": escalate_form or EscalateForm(),
            # Escalating withdraws this request: the form asks for a confirmation and a note.
            "pending_request": approval if approval is not None and approval.status == "pending" else None,
            "close_form": close_form or CloseForm(),
            "in_queue": in_queue,
            "customer_orders": customer_orders,
            "others_open": selectors.ticket_others_open_on_order(ticket),
            "proposal_form": proposal_form
            or ProposalForm(orders=customer_orders, methods=selectors.ticket_customer_methods(ticket)),
            "roles": request.roles,
            "review_queue_url": REVIEW_QUEUE_URL,
            "replies": list(ticket.replies.order_by("created_at", "id")),
            "reply_due": selectors.ticket_reply_due(ticket),
            "can_send_reply": "support" in request.roles,
            "nav": "tickets",
        },
        status=status,
    )


@tenant_view
@require_POST
def ticket_reply_view(request, pk: int):
    """Support's Send: the reviewed reply, emailed once for the ticket's current outcome."""
    ticket = _ticket_get(request, pk)
    try:
        reply, created = ticket_reply_send(ticket_id=ticket.pk, user=request.user, text=request.POST.get("text"))
    except DomainError as exc:
        messages.error(request, f"Not sent: {exc.message}")
    else:
        if created:
            messages.success(request, f"Reply queued for {reply.to}; it is sent once.")
        else:
            messages.info(request, f"This reply was already sent to {reply.to} ({reply.status}).")
    return redirect(reverse("ticket", kwargs={"pk": ticket.pk}))


@tenant_view
@require_GET
def ticket_status(request, pk: int):
    """The small JSON the ticket page polls while the agent runs: status plus new trace events."""
    ticket = _ticket_get(request, pk)
    try:
        since = max(int(request.GET.get("since", 0)), 0)
    except ValueError:
        since = 0
    return JsonResponse(_status_payload(ticket, since))


def _draft_superseded(draft, approval) -> bool:
    """Whether what came after the agent's draft replaces it on the page: finance asked for
    changes or denied after it, or a person proposed the refund."""
    if draft is None or approval is None:
        return False
    if approval.origin == "human" and approval.created_at >= draft.created_at:
        return True
    return bool(
        approval.status in ("changes_requested", "denied")
        and approval.decided_at
        and approval.decided_at >= draft.created_at
    )


def _form_errors(form) -> str:
    """A form's errors in one line for a message: "Label: error; Label: error"."""
    return "; ".join(
        f"{(form.fields[f].label or f.capitalize()) if f in form.fields else f}: {' '.join(e)}"
        for f, e in form.errors.items()
    )


@tenant_view(needs="tickets.work")
@require_POST
def ticket_escalate_view(request, pk: int):
    ticket = _ticket_get(request, pk)
    form = EscalateForm(request.POST)
    # A note the form refuses is no note: escalating without it would drop what was typed.
    if not form.is_valid():
        messages.error(request, f"Not escalated: {_form_errors(form)}")
        return _ticket_page(request, ticket, escalate_form=form, status=422)
    # A pending finance request is withdrawn by escalating: only when the person confirmed that
    # very request (not one that appeared since the page was drawn) and said why.
    approval = selectors.ticket_approval_latest(ticket)
    if not form.check_pending(approval if approval is not None and approval.status == "pending" else None):
        messages.error(request, f"Not escalated: {' '.join(form.non_field_errors())}")
        return _ticket_page(request, ticket, escalate_form=form, status=422)
    try:
        ticket_escalate(ticket=ticket, user=request.user, note=form.cleaned_data["note"])
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Ticket #{ticket.pk} escalated to a person.")
    return redirect(reverse("ticket", kwargs={"pk": ticket.pk}))


@tenant_view(needs="tickets.work")
@require_POST
def ticket_close_view(request, pk: int):
    ticket = _ticket_get(request, pk)
    form = CloseForm(request.POST)
    # Refused input closes nothing; the page shows the form again with what was typed.
    if not form.is_valid():
        messages.error(request, f"Not closed: {_form_errors(form)}")
        return _ticket_page(request, ticket, close_form=form, status=422)
    data = form.cleaned_data
    try:
        ticket_close(ticket=ticket, user=request.user, note=data["note"], reply=data["reply"])
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Ticket #{ticket.pk} closed.")
    return redirect(reverse("ticket", kwargs={"pk": ticket.pk}))


@tenant_view(needs="tickets.work")
@require_POST
def ticket_assign_view(request, pk: int):
    """Take the ticket (`to=me`) or hand it back (`to=` empty); back to where the button was."""
    ticket = _ticket_get(request, pk)
    to_me = request.POST.get("to") == "me"
    try:
        ticket_assign(ticket=ticket, user=request.user, to_me=to_me)
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Ticket #{ticket.pk} is yours." if to_me else f"Ticket #{ticket.pk} handed back.")
    back = request.POST.get("next") or ""
    if back.startswith("/") and not back.startswith("//"):
        return redirect(back)
    return redirect(reverse("ticket", kwargs={"pk": ticket.pk}))


@tenant_view(needs="tickets.work")
@require_POST
def ticket_propose_view(request, pk: int):
    ticket = _ticket_get(request, pk)
    form = ProposalForm(
        request.POST,
        orders=selectors.ticket_customer_orders(ticket) if ticket.order_id is None else None,
        methods=selectors.ticket_customer_methods(ticket),
    )
    if form.is_valid():
        try:
            made = form.propose(ticket=ticket, user=request.user)
        except DomainError as exc:
            form.add_domain_error(exc)
        else:
            messages.success(
                request,
                f"Refund of {made.amount} {made.currency} proposed (request #{made.pk}): "
                "finance decides it in the review queue.",
            )
            return redirect(reverse("ticket", kwargs={"pk": ticket.pk}))
    # Refused: the same page with what was typed, each reason at its field (the gate's at the form).
    return _ticket_page(request, ticket, proposal_form=form, status=422)


@tenant_view
@require_GET
def ticket_queue(request):
    """The escalation queue: tickets a person must finish, oldest first, filtered by reason and owner."""
    filters = QueueFilterForm(request.GET or None)
    wanted, refused = _filters_read(filters)
    owner = wanted.get("owner") or ""
    tickets = selectors.ticket_queue(
        tenant=request.tenant,
        reason=wanted.get("reason") or None,
        owner=request.user if owner == "me" else None,
        unowned=owner == "none",
    )
    if refused:
        tickets = tickets.none()
    page = Paginator(tickets, PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "refundagent/ticket_queue.html",
        {
            "page": page,
            "filters": filters,
            "query": query.urlencode(),
            "roles": request.roles,
            "nav": "queue",
            "here": request.get_full_path(),
        },
        status=400 if refused else 200,
    )
