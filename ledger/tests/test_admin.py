"""The ledger admin: history is read-only, and staff see only their own tenant."""

from datetime import timedelta

import pytest
from django.apps import apps
from django.contrib import admin
from django.test import Client, RequestFactory
from django.utils import timezone

from ledger.admin import TenantScopedAdminMixin
from ledger.models import (
    ApiToken,
    Dispute,
    IdempotencyKey,
    Order,
    Payment,
    ReconciliationFinding,
    ReconciliationRun,
    RefundEntry,
    RefundEntryItem,
    RefundRevision,
    ShopifyConnection,
    ShopifyOrder,
    WebhookEvent,
)
from ledger.services import ledger_refund_correct, ledger_refund_issue
from ledger.tenancy import api_token_create


def idempotency_key_make(owner):
    """A row of the API's Idempotency-Key table (written by the API's middleware in real use)."""
    IdempotencyKey.objects.create(
        user=owner, key="k-1", request_hash="0" * 64, expires_at=timezone.now() + timedelta(hours=1)
    )


@pytest.fixture
def history(demo):
    """The demo refunds plus an item refund and a correction in each tenant: every table has rows of both."""
    entries = []
    for order_id, item_id in (("ORD-5001", "ITEM-1"), ("ORD-7001", "ITEM-70")):
        order = Order.objects.get(external_id=order_id)
        entry = ledger_refund_issue(
            order=order, amount="20.00", currency="USD", idempotency_key=f"t-{order_id}", item_ids=[item_id]
        )
        ledger_refund_correct(entry=entry, new_amount="15.00", reason="fee")
        entries.append(entry)
        # Payments rows of each tenant: a processed webhook, a reconciliation run and its finding.
        WebhookEvent.objects.create(
            event_id=f"evt_{order_id}", type="refund.updated", payload={"id": f"evt_{order_id}"}, tenant=order.tenant
        )
        run = ReconciliationRun.objects.create(tenant=order.tenant, gateway="stripe", since=order.placed_at)
        ReconciliationFinding.objects.create(
            run=run,
            tenant=order.tenant,
            kind="missing_at_provider",
            entry=entry,
            detail=f"{order_id} not at the provider",
        )
        # A connected Shopify store of each tenant, with the order linked to it.
        store = ShopifyConnection.objects.create(
            tenant=order.tenant,
            shop_domain=f"{order.tenant.slug}.myshopify.com",
            client_id="client",
            client_secret="shpss_secret",
        )
        ShopifyOrder.objects.create(
            connection=store,
            order=order,
            shopify_id=f"gid://shopify/Order/{order.pk}",
            shopify_updated_at=order.placed_at,
        )
        Dispute.objects.create(
            tenant=order.tenant,
            order=order,
            payment=order.payments.first(),
            provider_ref=f"dp_{order_id}",
            status="needs_response",
            amount=order.total,
            currency=order.currency,
        )
    return entries


@pytest.fixture
def ops_request(user, history):
    request = RequestFactory().get("/admin/")
    request.user = user("ops")  # the demo superuser
    return request


@pytest.mark.parametrize("model", [RefundEntry, RefundEntryItem, RefundRevision, Payment, Order])
def test_ledger_history_cannot_be_added_changed_or_deleted_in_the_admin(ops_request, model):
    # given a superuser, who may do anything the admin allows
    model_admin = admin.site._registry[model]
    obj = model.objects.first()

    # then the admin allows none of these, even to them
    assert obj is not None
    assert not model_admin.has_add_permission(ops_request)
    assert not model_admin.has_change_permission(ops_request, obj)
    assert not model_admin.has_delete_permission(ops_request, obj)
    assert "delete_selected" not in model_admin.get_actions(ops_request)


def test_a_refund_entry_page_is_read_only_and_offers_no_delete(demo, user):
    # given a superuser in the admin and a corrected refund (ORD-5004 was refunded by the seed)
    entry = RefundEntry.objects.get(order__external_id="ORD-5004")
    ledger_refund_correct(entry=entry, new_amount="80.00", reason="fee")
    client = Client()
    client.force_login(user("ops"))

    # when they open it, try to post a change, and try the delete page
    page = client.get(f"/admin/ledger/refundentry/{entry.pk}/change/")
    posted = client.post(f"/admin/ledger/refundentry/{entry.pk}/change/", {"amount": "1.00"})
    delete = client.post(f"/admin/ledger/refundentry/{entry.pk}/delete/", {"post": "yes"})
    changelist = client.post(
        "/admin/ledger/refundentry/", {"action": "delete_selected", "_selected_action": [entry.pk], "post": "yes"}
    )

    # then it is shown with its revision, and nothing changed
    assert page.status_code == 200
    assert b"80.00" in page.content and b"Save" not in page.content
    assert posted.status_code == 403
    assert delete.status_code == 403
    assert changelist.status_code in (200, 302)
    entry.refresh_from_db()
    assert str(entry.amount) == "90.00" and entry.revisions.count() == 1


def test_staff_see_only_their_own_tenant(demo, user):
    # given a finance user of acme in the admin (finance may view orders)
    client = Client()
    client.force_login(user("acme-finance"))

    # when they list orders and open globex's
    listing = client.get("/admin/ledger/order/")
    globex_order = Order.objects.get(external_id="ORD-7001")
    foreign = client.get(f"/admin/ledger/order/{globex_order.pk}/change/")

    # then acme's orders are listed, globex's do not exist for them
    assert listing.status_code == 200
    assert b"ORD-5001" in listing.content and b"ORD-7001" not in listing.content
    assert foreign.status_code == 302  # the admin's "does not exist" redirect


@pytest.mark.parametrize("model", list(apps.get_app_config("ledger").get_models()), ids=lambda m: m.__name__)
def test_every_ledger_model_has_a_tenant_scoped_admin(model, history, user):
    # given every ledger model's admin, rows of both tenants, and an acme staff member
    for username in ("acme-finance", "globex-finance"):
        api_token_create(user=user(username))
        idempotency_key_make(user(username))
    model_admin = admin.site._registry[model]
    request = RequestFactory().get("/admin/")
    request.user = user("acme-finance")
    slug = f"{model_admin.tenant_field}__slug" if model_admin.tenant_field else "slug"

    # when they get the admin's queryset
    rows = model_admin.get_queryset(request)

    # then it is scoped by the mixin: acme's rows, none of globex's
    assert isinstance(model_admin, TenantScopedAdminMixin)
    assert rows.filter(**{slug: "acme"}).count() == rows.count() > 0
    assert model._default_manager.filter(**{slug: "globex"}).exists()


def test_a_user_without_a_tenant_sees_nothing(demo, django_user_model):
    staff = django_user_model.objects.create(username="drifter", is_staff=True)
    request = RequestFactory().get("/admin/")
    request.user = staff

    assert admin.site._registry[Order].get_queryset(request).count() == 0


def test_tokens_show_no_secret_and_can_be_revoked(demo, user):
    # given a token
    token = api_token_create(user=user("acme-support"))
    client = Client()
    client.force_login(user("ops"))
    row = ApiToken.objects.get(user=user("acme-support"))

    # when the admin shows it and revokes it
    page = client.get(f"/admin/ledger/apitoken/{row.pk}/change/")
    client.post("/admin/ledger/apitoken/", {"action": "revoke", "_selected_action": [row.pk]})

    # then the token never appears, and it no longer authenticates
    assert page.status_code == 200 and token.encode() not in page.content
    row.refresh_from_db()
    assert row.revoked_at is not None
    assert Client(HTTP_AUTHORIZATION=f"Bearer {token}").get("/api/orders/ORD-5001/ledger").status_code == 401


@pytest.mark.parametrize("model", list(apps.get_app_config("ledger").get_models()), ids=lambda m: m.__name__)
def test_every_ledger_admin_page_renders(model, history, user):
    # given a superuser and a row of every ledger table
    api_token_create(user=user("acme-support"))
    idempotency_key_make(user("acme-support"))
    client = Client()
    client.force_login(user("ops"))
    opts = model._meta
    obj = model._default_manager.order_by("pk").first()

    # when they open the list (searching, too) and one row
    listing = client.get(f"/admin/{opts.app_label}/{opts.model_name}/")
    searched = client.get(f"/admin/{opts.app_label}/{opts.model_name}/", {"q": "ORD-5001"})
    page = client.get(f"/admin/{opts.app_label}/{opts.model_name}/{obj.pk}/change/")

    # then every page renders
    assert (listing.status_code, searched.status_code, page.status_code) == (200, 200, 200)


def test_finance_resolves_a_finding_in_the_admin_and_nothing_else_changes(history, user):
    # given an unresolved finding of acme and a staff member of acme
    finding = ReconciliationFinding.objects.get(tenant__slug="acme")
    staff = user("ops")
    client = Client()
    client.force_login(staff)
    # when they try to edit it, and then use the resolve action
    client.post(f"/admin/ledger/reconciliationfinding/{finding.pk}/change/", {"kind": "amount_differs"})
    client.post("/admin/ledger/reconciliationfinding/", {"action": "resolve", "_selected_action": [finding.pk]})
    # then only the resolution was recorded, with who and when
    finding.refresh_from_db()
    assert finding.kind == "missing_at_provider"
    assert finding.resolved_at is not None and finding.resolved_by == staff
    assert not admin.site._registry[ReconciliationFinding].has_delete_permission(None, finding)


@pytest.mark.parametrize(
    "url,query,status",
    [
        ("/admin/ledger/order/", "placed_at__year=99999999999999999999", 302),  # OverflowError before
        ("/admin/ledger/order/", "placed_at__year=9999", 302),  # ValueError (year 10000) before
        ("/admin/ledger/refundentry/", "created_at__year=0", 302),
        ("/admin/ledger/payment/", "created_at__iso_year=99999999999999999999", 302),
        ("/admin/ledger/customer/", "email__regex=(", 400),  # DataError (PostgreSQL) before
        ("/admin/ledger/refundrevision/", "id__range=0", 400),  # IndexError before
    ],
)
def test_a_lookup_that_cannot_run_is_a_4xx_not_a_500(demo, user, url, query, status):
    # given finance of acme in the admin (GET only: nothing to write)
    client = Client(raise_request_exception=False)
    client.force_login(user("acme-finance"))

    # when a list's querystring carries a lookup value the database or Python cannot take
    response = client.get(f"{url}?{query}")

    # then the admin's redirect for bad filters (?e=1), or a 400 for a lookup no querystring may use
    assert response.status_code == status
    if status == 302:
        assert response["Location"] == f"{url}?e=1"


def test_an_action_on_a_selected_id_that_is_not_a_number_is_a_400_and_does_nothing(history, user):
    # given an unresolved finding and an operator in the admin
    finding = ReconciliationFinding.objects.filter(resolved_at__isnull=True).first()
    client = Client(raise_request_exception=False)
    client.force_login(user("ops"))

    # when "resolve" is posted with a selected id that is not a number, beside a real one
    response = client.post(
        "/admin/ledger/reconciliationfinding/",
        {"action": "resolve", "index": "0", "_selected_action": ["1 OR 1=1", finding.pk]},
    )

    # then 400 and nothing resolved (before: 500)
    assert response.status_code == 400
    assert not ReconciliationFinding.objects.filter(resolved_at__isnull=False).exists()


@pytest.mark.parametrize("url", ["order", "customer", "payment", "refundentry", "refundrevision"])
def test_the_lists_name_no_other_tenant_but_to_a_superuser(history, user, url):
    # given acme and globex, with rows of both, and finance of acme
    finance = Client()
    finance.force_login(user("acme-finance"))
    ops = Client()
    ops.force_login(user("ops"))

    # when finance and an operator (superuser) open the list
    mine = finance.get(f"/admin/ledger/{url}/").content.decode()
    everyone = ops.get(f"/admin/ledger/{url}/").content.decode()

    # then finance gets no "By tenant" filter, which listed every tenant's slug and id; the superuser keeps it
    assert "globex" not in mine.lower() and "By tenant" not in mine
    assert "globex" in everyone and "By tenant" in everyone


@pytest.mark.parametrize("model", list(apps.get_app_config("ledger").get_models()), ids=lambda m: m.__name__)
def test_no_list_filter_offers_the_tenants_to_staff_of_one(model, demo, user):
    # given every ledger admin, a superuser and a staff member of acme
    model_admin = admin.site._registry[model]
    as_staff, as_superuser = RequestFactory().get("/admin/"), RequestFactory().get("/admin/")
    as_staff.user, as_superuser.user = user("acme-finance"), user("ops")

    # when each gets the list's filters
    filters = [f[0] if isinstance(f, tuple) else f for f in model_admin.get_list_filter(as_staff)]

    # then none of the staff member's is the tenant, and the superuser's are all declared
    assert model_admin.tenant_field not in filters
    assert list(model_admin.get_list_filter(as_superuser)) == list(model_admin.list_filter)
