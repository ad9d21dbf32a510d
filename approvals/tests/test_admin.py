"""The finance review queue in the Django admin, on a shop of its own (not the demo's)."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from approvals.models import ApprovalRequest, Capability, RefundPolicy
from ledger.models import Order, RefundEntry, Tenant
from tests.factories import manual_payout_record
from tests.helpers import signed_in

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/approvals/approvalrequest/"


def change_url(request):
    return reverse("admin:approvals_approvalrequest_change", args=[request.pk])


def decide_url(request, decision):
    return reverse("admin:approvals_approvalrequest_decide", args=[request.pk, decision])


def test_finance_sees_the_queue_and_approves_from_the_admin(file_request, people, django_capture_on_commit_callbacks):
    # given a pending request for a 120.00 USD order and a finance user in the admin
    request = file_request("120.00")
    finance = signed_in(people["finance"])
    # when they open the queue and the request
    queue = finance.get(CHANGELIST)
    assert queue.status_code == 200
    assert change_url(request) in queue.content.decode()
    page = finance.get(change_url(request))
    html = page.content.decode()
    # then the review page shows the exact action, its hash and key, the ledger, and the buttons
    assert page.status_code == 200
    for text in (
        "120.00 USD",
        "ORD-1",
        "CUST-1",
        request.args_hash,
        request.idempotency_key,
        'id="ra-ledger"',
        'id="ra-approve"',
        'id="ra-deny"',
        'id="ra-request_changes"',
        'id="ra-escalate"',
        "refund-policy-v4",
        "visa ****4242",
    ):
        assert text in html, text
    assert "pi_test" not in html  # the payment reference stays redacted
    assert 'name="_save"' not in html  # nothing to edit
    # when they click approve, the amount and order are shown once more
    confirm = finance.get(decide_url(request, "approve"))
    assert confirm.status_code == 200
    assert 'id="ra-confirm-amount">120.00 USD<' in confirm.content.decode()
    assert request.args_hash in confirm.content.decode()
    # and confirming posts the hash shown
    with django_capture_on_commit_callbacks(execute=True):
        done = finance.post(decide_url(request, "approve"), {"args_hash": request.args_hash, "note": "ok"})
    assert done.status_code == 302 and done["Location"] == change_url(request)
    request = manual_payout_record(request)  # the manual gateway: finance paid by hand
    assert request.status == "executed"
    assert RefundEntry.objects.get(idempotency_key=request.idempotency_key).amount == Decimal("120.00")
    after = finance.get(change_url(request)).content.decode()
    assert 'id="ra-approve"' not in after and 'id="ra-verification"' in after


def test_a_support_user_cannot_see_or_decide(file_request, people):
    request = file_request("120.00")
    # not staff: the admin sends them to log in
    support = signed_in(people["support"])
    assert support.get(CHANGELIST).status_code == 302
    assert support.post(decide_url(request, "approve"), {"args_hash": request.args_hash}).status_code == 302
    # even made staff: no view permission, no decision
    support = signed_in(people["support"], is_staff=True)
    assert support.get(CHANGELIST).status_code == 403
    assert support.get(change_url(request)).status_code in (302, 403)
    assert support.post(decide_url(request, "approve"), {"args_hash": request.args_hash}).status_code == 403
    assert ApprovalRequest.objects.get(pk=request.pk).status == "pending"


def test_the_filer_gets_no_buttons_and_cannot_approve(file_request, people):
    request = file_request("120.00", filer="lead")
    lead = signed_in(people["lead"])
    html = lead.get(change_url(request)).content.decode()
    assert 'id="ra-approve"' not in html and "maker-checker" in html
    response = lead.post(decide_url(request, "approve"), {"args_hash": request.args_hash}, follow=True)
    assert "Not decided" in response.content.decode()
    assert ApprovalRequest.objects.get(pk=request.pk).status == "pending"


def test_another_tenants_request_does_not_exist_for_them(file_request, people):
    request = file_request("120.00")
    other = signed_in(people["other-finance"])
    assert change_url(request) not in other.get(CHANGELIST).content.decode()
    assert other.get(change_url(request)).status_code == 302  # the admin's "does not exist" redirect
    assert other.post(decide_url(request, "approve"), {"args_hash": request.args_hash}).status_code == 404
    assert ApprovalRequest.objects.get(pk=request.pk).status == "pending"


def test_a_stale_hash_is_refused(file_request, people):
    request = file_request("120.00")
    response = signed_in(people["finance"]).post(decide_url(request, "approve"), {"args_hash": "f" * 64}, follow=True)
    assert "Not decided" in response.content.decode()
    assert ApprovalRequest.objects.get(pk=request.pk).status == "pending"


def test_deny_needs_a_note_and_request_changes_takes_an_amount(file_request, people):
    request = file_request("120.00")
    finance = signed_in(people["finance"])
    missing = finance.post(decide_url(request, "deny"), {"args_hash": request.args_hash, "note": ""})
    assert missing.status_code == 422 and "This field is required" in missing.content.decode()
    assert ApprovalRequest.objects.get(pk=request.pk).status == "pending"
    changed = finance.post(
        decide_url(request, "request_changes"),
        {"args_hash": request.args_hash, "note": "Half, please.", "wanted_amount": "60.00"},
    )
    assert changed.status_code == 302
    request.refresh_from_db()
    assert (request.status, request.requested_amount_change, request.amount) == (
        "changes_requested",
        Decimal("60.00"),
        Decimal("120.00"),
    )


def test_a_wanted_amount_finer_than_the_requests_currency_is_refused_and_nothing_is_decided(
    approval_request_make, make_order, people
):
    # given a pending request on a 1000 JPY order (yen have no minor unit)
    request = approval_request_make(order=make_order("1000", currency="JPY", days_old=3), filer=people["support"])
    # when finance requests changes for 250.50 yen in the admin
    response = signed_in(people["finance"]).post(
        decide_url(request, "request_changes"),
        {"args_hash": request.args_hash, "note": "Less, please.", "wanted_amount": "250.50"},
        follow=True,
    )
    # then it is refused with the reason, and the request is still pending, with no vote
    assert "JPY amounts have at most 0 decimal places" in response.content.decode()
    request.refresh_from_db()
    assert (request.status, request.requested_amount_change) == ("pending", None)
    assert not request.votes.exists()


def test_the_queue_lists_pending_first_then_oldest_and_filters(file_request, people):
    from approvals.services.decisions import approval_request_decide

    old_denied = file_request("120.00")
    approval_request_decide(
        request_id=old_denied.pk, user=people["finance"], decision="deny", args_hash=old_denied.args_hash, note="no"
    )
    pending = file_request("50.00")
    expired = file_request("750.00")
    ApprovalRequest.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(hours=1))
    finance = signed_in(people["finance"])
    response = finance.get(CHANGELIST)
    ids = [r.pk for r in response.context["cl"].result_list]
    assert ids == [pending.pk, expired.pk, old_denied.pk]
    assert [r.pk for r in finance.get(CHANGELIST + "?expiry=expired").context["cl"].result_list] == [expired.pk]
    assert [r.pk for r in finance.get(CHANGELIST + "?status__exact=denied").context["cl"].result_list] == [
        old_denied.pk
    ]
    assert [r.pk for r in finance.get(CHANGELIST + "?q=ORD-2").context["cl"].result_list] == [pending.pk]


def test_failed_requests_show_a_red_badge(file_request, people):
    request = file_request("120.00")
    ApprovalRequest.objects.filter(pk=request.pk).update(
        status="failed",
        verification={
            "ok": False,
            "checks": [{"name": "amount_exact", "ok": False, "expected": "120.00", "actual": "10.00"}],
        },
    )
    finance = signed_in(people["finance"])
    assert "ra-badge-failed" in finance.get(CHANGELIST + "?status__exact=failed").content.decode()
    html = finance.get(change_url(request)).content.decode()
    assert 'id="ra-failed"' in html and "amount_exact" in html


def _bulk_requests(n, order):
    order = Order.objects.select_related("tenant").get(pk=order.pk)
    policy = RefundPolicy.objects.current_for(order.tenant)
    now = timezone.now()
    start = ApprovalRequest.objects.count()
    ApprovalRequest.objects.bulk_create(
        ApprovalRequest(
            tenant=order.tenant,
            order=order,
            amount=Decimal("10.00"),
            currency="USD",
            args={"n": i},
            args_hash=f"{i:064d}",
            idempotency_key=f"bulk:{start + i}",
            policy=policy,
            policy_version=policy.version,
            refundable_at_request=Decimal("120.00"),
            ticket_ref=i,
            expires_at=now + timedelta(hours=i % 48),
            status="pending" if i % 3 else "denied",
        )
        for i in range(n)
    )


def _changelist_queries(client) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(CHANGELIST)
    assert response.status_code == 200
    return len(queries)


def test_the_queue_costs_the_same_queries_at_10_and_1000_requests(orders, people):
    finance = signed_in(people["finance"])
    _bulk_requests(10, orders["120.00"])
    at_10 = _changelist_queries(finance)
    _bulk_requests(990, orders["120.00"])
    at_1000 = _changelist_queries(finance)
    assert at_10 == at_1000, (at_10, at_1000)
    assert at_10 <= 12, at_10


def test_operators_switch_a_capability_off_in_the_list(people):
    ops = signed_in(people["ops"])
    capability = Capability.objects.get(name="orders.lookup_order")
    page = ops.get("/admin/approvals/capability/")
    assert page.status_code == 200 and 'name="form-0-enabled"' in page.content.decode()
    assert ops.get(f"/admin/approvals/capability/{capability.pk}/change/").status_code == 200


def test_publish_new_version_copies_into_a_draft_then_publishes(policy, people):
    ops = signed_in(people["ops"])
    v4 = policy
    ops.post("/admin/approvals/refundpolicy/", {"action": "copy_to_draft", "_selected_action": [v4.pk]})
    draft = RefundPolicy.objects.get(tenant=v4.tenant, status="draft")
    assert draft.text == v4.text and draft.window_days == 30
    # publishing goes through a confirmation step; with no replay of the draft, an operator gives a reason
    confirm = ops.post("/admin/approvals/refundpolicy/", {"action": "publish", "_selected_action": [draft.pk]})
    assert confirm.status_code == 302 and confirm["Location"].endswith(f"/{draft.pk}/publish/")
    assert 'id="ra-publish-no-replay"' in ops.get(confirm["Location"]).content.decode()
    assert RefundPolicy.objects.get(pk=draft.pk).status == "draft"
    ops.post(confirm["Location"], {"without_replay_reason": "Same rules as v4, new name."})
    v4.refresh_from_db()
    draft.refresh_from_db()
    assert (draft.status, v4.status) == ("published", "retired")
    assert RefundPolicy.objects.current_for(v4.tenant) == draft
    # a published version is read-only in the admin
    assert 'name="window_days"' not in ops.get(f"/admin/approvals/refundpolicy/{draft.pk}/change/").content.decode()


def test_a_policy_version_cannot_be_deleted_from_the_admin(policy, people):
    # given the operator (superuser) on the policy admin
    client = signed_in(people["ops"])
    # when they try the delete page or the bulk delete action
    delete_page = client.get(reverse("admin:approvals_refundpolicy_delete", args=[policy.pk]))
    changelist = client.get(reverse("admin:approvals_refundpolicy_changelist"))
    bulk = client.post(
        reverse("admin:approvals_refundpolicy_changelist"),
        {"action": "delete_selected", "_selected_action": [policy.pk], "post": "yes"},
    )
    # then nothing offers or performs a deletion
    assert delete_page.status_code == 403
    assert "delete_selected" not in changelist.content.decode()
    assert bulk.status_code in (200, 302)
    assert RefundPolicy.objects.filter(pk=policy.pk).exists()


def test_the_queue_counts_at_most_the_cap_and_still_pages(orders, people, monkeypatch):
    # given more requests than the paginator counts
    from approvals.admin import review_queue as approvals_admin

    monkeypatch.setattr(approvals_admin, "QUEUE_COUNT_CAP", 60)
    _bulk_requests(120, orders["120.00"])
    finance = signed_in(people["finance"])

    # when the reviewer opens the queue
    response = finance.get(CHANGELIST)

    # then the count stops at the cap, the first page has 50 rows and the second page exists
    assert response.context["cl"].result_count == 60
    assert len(response.context["cl"].result_list) == 50
    assert finance.get(CHANGELIST + "?p=2").status_code == 200


def test_the_policy_version_filter_offers_the_tenants_versions_and_filters(orders, people):
    # given requests under the tenant's current policy
    _bulk_requests(3, orders["120.00"])
    version = ApprovalRequest.objects.values_list("policy_version", flat=True).first()
    other = RefundPolicy.objects.exclude(tenant=orders["120.00"].tenant).values_list("version", flat=True)
    finance = signed_in(people["finance"])

    # when the reviewer opens the queue, and then filters by another version
    page = finance.get(CHANGELIST)
    offered = [
        c["display"]
        for spec in page.context["cl"].filter_specs
        if spec.title == "policy version"
        for c in spec.choices(page.context["cl"])
    ]
    filtered = finance.get(CHANGELIST + "?policy_version=v-none")

    # then the tenant's versions are offered (not another tenant's only), and the filter filters
    assert version in offered
    assert not set(other) - {version} & set(offered)
    assert len(filtered.context["cl"].result_list) == 0


@pytest.mark.parametrize(
    "query,status",
    [
        # values the lookup check lets through that fail only when the SQL is compiled: ?e=1
        ("created_at__year=0", 302),  # ValueError: year 0 is out of range
        ("expires_at__iso_year=99999999999999999999", 302),  # ISO calendar component out of range
        ("ticket_ref__in=99999999999999999999", 302),  # too big for the database's integer
        # lookups no querystring may use: 400
        ("amount__regex=(", 400),  # DataError: invalid regular expression (PostgreSQL)
        ("id__range=0", 400),  # IndexError: a range of one bound
    ],
)
def test_a_lookup_that_cannot_run_is_a_4xx_not_a_500(file_request, people, query, status):
    # given a pending request and finance on the queue
    file_request("120.00")
    finance = signed_in(people["finance"])
    finance.raise_request_exception = False

    # when the querystring carries a lookup value the database or Python cannot take
    response = finance.get(f"{CHANGELIST}?{query}")

    # then the admin's redirect for bad filters (or a 400), and the queue still opens (before: 500)
    assert response.status_code == status
    if status == 302:
        assert response["Location"] == f"{CHANGELIST}?e=1"
    assert finance.get(CHANGELIST).status_code == 200


def test_an_action_on_a_selected_id_that_is_not_a_number_is_a_400_and_does_nothing(file_request, people):
    # given a request whose payment the provider refused
    request = file_request("120.00")
    ApprovalRequest.objects.filter(pk=request.pk).update(status=ApprovalRequest.Status.PAYMENT_FAILED)
    finance = signed_in(people["finance"])
    finance.raise_request_exception = False

    # when finance posts "file again" with a selected id that is not a number, beside a real one
    response = finance.post(
        CHANGELIST, {"action": "payment_file_again", "index": "0", "_selected_action": ["abc", request.pk]}
    )

    # then 400 and nothing filed (before: 500 "Field 'id' expected a number but got 'abc'")
    assert response.status_code == 400
    assert ApprovalRequest.objects.count() == 1
    assert ApprovalRequest.objects.get().status == ApprovalRequest.Status.PAYMENT_FAILED


def test_the_policy_list_names_no_other_tenant_but_to_a_superuser(policy, people):
    # given two shops (`people` made "other", with no policy of its own)
    # when finance of the shop and an operator (superuser) open the policy list
    finance = signed_in(people["finance"], is_staff=True).get("/admin/approvals/refundpolicy/")
    ops = signed_in(people["ops"]).get("/admin/approvals/refundpolicy/")

    # then finance gets no "By tenant" filter, which listed every tenant; the superuser keeps it
    other = f"?tenant__id__exact={Tenant.objects.get(slug='other').pk}"
    assert finance.status_code == ops.status_code == 200
    assert other not in finance.content.decode() and "By tenant" not in finance.content.decode()
    assert other in ops.content.decode()
