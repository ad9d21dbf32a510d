"""The admin review queue (the approval request list page) at 1k and at 100k approval requests.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/refundagent python benchmarks/admin_queue.py

Works in "<DATABASE_URL's name>_admin" (created, migrated and filled here when missing, kept for
the next run): demo data, then approval requests in bulk (10% pending, the rest decided, spread
over a year and over 10k orders) up to 1k, measured; then up to 100k, measured again. Each
measurement: the list page as a finance reviewer sees it (production-like settings, DEBUG off),
after a warm-up, its SQL queries and median / p90 ms over --requests requests. The query count
must not grow with the table. Prints its figures; asserts nothing.
"""

import argparse
import shutil
import statistics
import sys
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import (  # noqa: E402
    database_ensure,
    database_url,
    db_name,
    demo_orders_create,
    django_setup,
    p90,
    url_with_db,
)


def fill(target: int) -> int:
    """Approval requests up to `target` (what is there counts). Returns how many there are."""
    from django.apps import apps
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction
    from django.utils import timezone

    Tenant, Order = apps.get_model("ledger", "Tenant"), apps.get_model("ledger", "Order")
    Policy, Request = apps.get_model("approvals", "RefundPolicy"), apps.get_model("approvals", "ApprovalRequest")
    have = Request.objects.count()
    if have >= target:
        return have
    acme = Tenant.objects.get(slug="acme")
    policy = Policy.objects.get(tenant=acme, status="published")
    user = get_user_model().objects.get(username="acme-support")
    now = timezone.now()
    orders = list(Order.objects.filter(tenant=acme, external_id__startswith="QUEUE-"))
    if len(orders) < 10_000:
        orders += demo_orders_create(
            [f"QUEUE-{i}" for i in range(len(orders), 10_000)], total="120.00", days_old=5, batch_size=5000
        )
    statuses = ["pending"] + ["executed"] * 6 + ["denied"] * 2 + ["expired"]
    k = have
    while k < target:
        n = min(5000, target - k)
        with transaction.atomic():
            Request.objects.bulk_create(
                [
                    Request(
                        tenant=acme,
                        order=orders[(k + i) % len(orders)],
                        amount=Decimal("120.00"),
                        currency="USD",
                        args={"order": orders[(k + i) % len(orders)].external_id, "amount": "120.00"},
                        args_hash=f"{k + i:064x}",
                        idempotency_key=f"queue-bench:{k + i}",
                        policy=policy,
                        policy_version=policy.version,
                        refundable_at_request=Decimal("120.00"),
                        ticket_ref=k + i,
                        expires_at=now + timedelta(days=2),
                        status=statuses[(k + i) % len(statuses)],
                        requested_by=user,
                    )
                    for i in range(n)
                ]
            )
        k += n
    with connection.cursor() as cursor:  # spread the requests' ages over a year (created_at is auto_now_add)
        cursor.execute(
            f"UPDATE {Request._meta.db_table} SET created_at = now() - (id % 8760) * interval '1 hour' "
            "WHERE idempotency_key LIKE 'queue-bench:%%'"
        )
        cursor.execute("ANALYZE")
    return Request.objects.count()


def measure(requests: int) -> dict:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.urls import reverse

    client = Client()
    client.force_login(get_user_model().objects.get(username="acme-finance"))
    path = reverse("admin:approvals_approvalrequest_changelist")
    for _ in range(3):
        response = client.get(path, secure=True)  # behind the TLS proxy: no redirect to https
        if response.status_code != 200:
            raise SystemExit(f"{path} answered {response.status_code}")
    times, queries = [], []
    for _ in range(requests):
        count = [0]

        def counter(execute, sql, params, many, context, count=count):
            count[0] += 1
            return execute(sql, params, many, context)

        with connection.execute_wrapper(counter):
            started = time.perf_counter()
            response = client.get(path, secure=True)
            times.append((time.perf_counter() - started) * 1000)
        queries.append(count[0])
        assert response.status_code == 200, response.status_code
    return {
        "median": statistics.median(times),
        "p90": p90(times),
        "q": int(statistics.median(queries)),
        "q_max": max(queries),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20, help="page loads measured per size")
    parser.add_argument("--small", type=int, default=1_000)
    parser.add_argument("--large", type=int, default=100_000)
    args = parser.parse_args()

    url = url_with_db(database_url(), db_name(database_url()) + "_admin")
    if database_ensure(url):
        print(f"created database {db_name(url)}")
    django_setup(url)
    import tempfile

    from django.conf import settings
    from django.core.management import call_command

    # DEBUG off serves hashed static names from collectstatic's manifest, as in production; collect
    # into a scratch directory (before any static file is looked up), not into the work tree.
    settings.STATIC_ROOT = tempfile.mkdtemp(prefix="admin-queue-static-")
    call_command("collectstatic", interactive=False, verbosity=0)
    call_command("seed_demo")
    rows = []
    for target in (args.small, args.large):
        started = time.perf_counter()
        total = fill(target)
        print(f"  {total} approval requests ready ({time.perf_counter() - started:.0f} s)", flush=True)
        rows.append((total, measure(args.requests)))
    print(
        f"\nadmin review queue (/admin/approvals/approvalrequest/, finance reviewer, DEBUG off), PostgreSQL "
        f"{db_name(url)}, {args.requests} page loads per size after 3 warm-up"
    )
    print(f"{'approval requests':>17} {'queries':>7} {'median ms':>9} {'p90 ms':>8}")
    for total, r in rows:
        print(f"{total:>17} {r['q']:>7} {r['median']:>9.1f} {r['p90']:>8.1f}")
    (small_n, small), (large_n, large) = rows
    shutil.rmtree(settings.STATIC_ROOT, ignore_errors=True)
    print(
        f"admin_queue_queries_{small_n}={small['q']} admin_queue_queries_{large_n}={large['q']} "
        f"constant={'yes' if small['q_max'] == large['q_max'] else 'no'} median_ms_{large_n}={large['median']:.1f} "
        f"ratio_ms_{large_n}_vs_{small_n}={large['median'] / small['median']:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
