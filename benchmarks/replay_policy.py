"""Policy replay at 100,000 recorded gate decisions (docs/replay.md): how long `replay_policy`
takes to decide them all again with a draft. The target is under 60 seconds on this machine.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/refundagent python benchmarks/replay_policy.py

Works in "<DATABASE_URL's name>_replay" (created, migrated and filled here when missing, kept for
the next run): the demo data, 10,000 orders of the demo customer, then decision records in bulk
up to --decisions, spread over the last 29 days, on orders 0 to 59 days old at the decision, a
fifth of them item refunds (the order's lines recorded), a tenth escalated by the model, a
twentieth people's exceptions (the window waived where the order is older than it), amounts
from 10.00 to 900.00 (some above the dual-control threshold). Then the command replays them with
a draft whose window is 14 days instead of 30. Prints the seconds and the command's summary
line; asserts nothing.
"""

import argparse
import io
import sys
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import database_ensure, database_url, db_name, demo_orders_create, django_setup, url_with_db  # noqa: E402

DRAFT = "replay-bench-v5"


def fill(target: int) -> int:
    """Decision records of acme up to `target` (what is there counts). Returns how many there are."""
    from django.apps import apps
    from django.db import connection, transaction
    from django.utils import timezone

    Tenant, Order = apps.get_model("ledger", "Tenant"), apps.get_model("ledger", "Order")
    Policy, Record = apps.get_model("approvals", "RefundPolicy"), apps.get_model("approvals", "DecisionRecord")
    acme = Tenant.objects.get(slug="acme")
    have = Record.objects.filter(tenant=acme).count()
    if have >= target:
        return have
    policy = Policy.objects.get(tenant=acme, status="published")
    orders = list(Order.objects.filter(tenant=acme, external_id__startswith="REPLAY-"))
    if len(orders) < 10_000:
        orders += demo_orders_create(
            [f"REPLAY-{i}" for i in range(len(orders), 10_000)], total="900.00", days_old=5, batch_size=5000
        )
    now = timezone.now()
    k = have
    while k < target:
        n = min(5000, target - k)
        batch = []
        for i in range(k, k + n):
            order = orders[i % len(orders)]
            decided_at = now - timedelta(minutes=(i * 7) % (29 * 24 * 60))
            age = i % 60
            amount = Decimal(10 + (i * 37) % 891).quantize(Decimal("0.01"))
            items = i % 5 == 0
            escalated = i % 10 == 3
            # A person's exception: the window waived where the order is older than it.
            person = i % 20 == 7
            outcome = "escalated" if (escalated or age > 30) and not person else "approval_required"
            approvals = (2 if amount > 500 or person else 1) if outcome == "approval_required" else 0
            batch.append(
                Record(
                    tenant=acme,
                    order=order,
                    ticket_ref=i,
                    source="proposal" if person else "agent",
                    policy_exception=person,
                    waived_rules=["window"] if person and age > 30 else [],
                    decided_at=decided_at,
                    order_external_id=order.external_id,
                    order_status="delivered",
                    order_placed_at=decided_at - timedelta(days=age, hours=1),
                    order_age_days=age,
                    order_total=Decimal("900.00"),
                    currency="USD",
                    order_refunded=Decimal("0.00"),
                    order_exposure=Decimal("0.00"),
                    order_lines=[
                        {"line_no": 1, "item_id": "ITEM-A", "price": "600.00", "quantity": 1, "refunded_quantity": 0},
                        {"line_no": 2, "item_id": "ITEM-B", "price": "300.00", "quantity": 1, "refunded_quantity": 0},
                    ],
                    requested_amount=amount,
                    requested_currency="USD",
                    item_ids=["ITEM-B"] if items else [],
                    destination={"kind": "original", "method": "card_1", "method_kind": "card", "foreign": False},
                    proposal={
                        "recommendation": "escalate" if escalated else "refund",
                        "amount": str(amount),
                        "policy_version": policy.version,
                        "destination": None,
                        "customer_reply": ""
                        if person
                        else "We passed your request for this order to our finance team for review.",
                        "reply_promises_payment": False,
                    },
                    policy=policy,
                    policy_version=policy.version,
                    outcome=outcome,
                    allowed_amount=(min(amount, Decimal("300.00")) if items else amount)
                    if outcome == "approval_required"
                    else None,
                    codes=["eligible"] if outcome == "approval_required" else ["outside_window"],
                    required_approvals=approvals,
                )
            )
        with transaction.atomic():
            Record.objects.bulk_create(batch)
        k += n
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return Record.objects.filter(tenant=acme).count()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--decisions", type=int, default=100_000)
    args = parser.parse_args()

    url = url_with_db(database_url(), db_name(database_url()) + "_replay")
    if database_ensure(url):
        print(f"created database {db_name(url)}")
    django_setup(url)
    from django.core.management import call_command

    from approvals.models import RefundPolicy

    call_command("seed_demo", stdout=io.StringIO())
    started = time.perf_counter()
    total = fill(args.decisions)
    print(f"  {total} decision records ready ({time.perf_counter() - started:.0f} s)", flush=True)
    if not RefundPolicy.objects.filter(tenant__slug="acme", version=DRAFT).exists():
        call_command(
            "policy_draft", "--tenant", "acme", "--name", DRAFT, "--set", "window_days=14", stdout=io.StringIO()
        )

    out = io.StringIO()
    started = time.perf_counter()
    call_command("replay_policy", "--tenant", "acme", "--draft", DRAFT, "--days", "30", stdout=out)
    seconds = time.perf_counter() - started
    summary = out.getvalue().strip().splitlines()[-1]
    print(f"\nreplay_policy over {total} recorded decisions (PostgreSQL {db_name(url)}, DEBUG off): {seconds:.1f} s")
    print(summary)
    print(f"replay_seconds_{total}={seconds:.1f} target_seconds=60 within={'yes' if seconds < 60 else 'no'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
