"""The agent runtime's own overhead, per step and per ticket, with the offline provider.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/refundagent .venv/bin/python benchmarks/agent_overhead.py

Works in a scratch database (a test database on DATABASE_URL's server, or on the embedded one
without it, created and dropped here), files tickets through the service (ticket_create ->
on_commit -> the Celery task, run eagerly in-process) and measures, from filing to
approval_required, the wall time and the SQL queries per ticket and per loop step (one model
call and the tool calls it makes). It then adds many other tickets, orders and trace events and
measures again: the figures must not grow with the size of the database. Targets: <= 10
queries per step, <= 80 per ticket.
"""

import argparse
import os
import statistics
import sys
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "refundagent.config.settings")

import django  # noqa: E402

django.setup()

from _bench import demo_ticket_file, demo_ticket_settle, scratch_database  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.utils import timezone  # noqa: E402

QUERIES_PER_STEP_MAX = 10
QUERIES_PER_TICKET_MAX = 80


class Metered:
    """Marks the query count and the time at the start of every loop step: a model call with
    the tool calls it makes, or the runtime's decision on a draft (a step of its own)."""

    def __init__(self, capture):
        self.capture = capture
        self.marks: list[tuple[int, float]] = []

    def mark(self):
        self.marks.append((len(self.capture), time.perf_counter()))


def measure(n: int, support) -> dict:
    from refundagent.agent import loop
    from refundagent.agent.providers.offline import OfflineProvider

    ticket_ms, ticket_q, step_ms, step_q, setup_q, decision_q = [], [], [], [], [], []
    original_provider, original_step = loop.provider_get, loop._Loop.step
    try:
        loop.provider_get = lambda name=None: OfflineProvider()
        for _ in range(n):
            with CaptureQueriesContext(connection) as capture:
                metered = Metered(capture)

                def step(self, m=metered):
                    m.mark()
                    return original_step(self)

                loop._Loop.step = step
                started = time.perf_counter()
                ticket = demo_ticket_file(support)
                ended = time.perf_counter()
            demo_ticket_settle(ticket, support)  # neither timed nor counted
            total = len(capture.captured_queries)
            ticket_ms.append((ended - started) * 1000)
            ticket_q.append(total)
            # Filing and claiming (up to the first step) are the ticket's setup; a step runs from one
            # loop step to the next (the last one: the runtime's decision: draft, gate, approval, stop).
            setup_q.append(metered.marks[0][0])
            marks = [*metered.marks, (total, ended)]
            for k, ((q0, t0), (q1, t1)) in enumerate(zip(marks, marks[1:], strict=False)):
                step_q.append(q1 - q0)
                step_ms.append((t1 - t0) * 1000)
                if k == len(marks) - 2:
                    decision_q.append(q1 - q0)
    finally:
        loop.provider_get, loop._Loop.step = original_provider, original_step
    return {
        "tickets": n,
        "ms_ticket": statistics.median(ticket_ms),
        "q_ticket": statistics.median(ticket_q),
        "q_ticket_max": max(ticket_q),
        "ms_step": statistics.median(step_ms),
        "q_step": statistics.median(step_q),
        "q_step_max": max(step_q),
        "q_setup": statistics.median(setup_q),
        "q_decision": statistics.median(decision_q),
        "steps": len(step_q) // n,
    }


def grow(orders: int, tickets: int, events_per_ticket: int):
    """Many other orders, tickets and trace events, in the demo tenant and in another one."""
    from django.contrib.auth import get_user_model

    from ledger.models import Customer, Order, OrderItem, Payment, Tenant
    from refundagent.models import Ticket, TraceEvent

    other, _ = Tenant.objects.get_or_create(slug="bench-other", defaults={"name": "Benchmark other"})
    acme = Tenant.objects.get(slug="acme")
    user = get_user_model().objects.get(username="acme-support")
    now = timezone.now()
    made_orders = []
    for tenant in (acme, other):
        customer, _ = Customer.objects.get_or_create(
            tenant=tenant, external_id="BENCH-CUST", defaults={"name": "Bench", "email": "bench@example.com"}
        )
        batch = Order.objects.bulk_create(
            [
                Order(
                    tenant=tenant,
                    customer=customer,
                    external_id=f"BENCH-{i}",
                    total=Decimal("10.00"),
                    currency="USD",
                    placed_at=now - timedelta(days=i % 60),
                )
                for i in range(orders // 2)
            ],
            batch_size=2000,
        )
        OrderItem.objects.bulk_create(
            [OrderItem(order=o, line_no=1, item_id="B", name="Bench item", price=Decimal("10.00")) for o in batch],
            batch_size=2000,
        )
        Payment.objects.bulk_create(
            [
                Payment(
                    order=o,
                    method="card",
                    card_brand="visa",
                    card_last4="0000",
                    payment_ref=f"pi_bench{o.pk:08d}",
                    amount=Decimal("10.00"),
                    currency="USD",
                )
                for o in batch
            ],
            batch_size=2000,
        )
        made_orders.extend((tenant, customer, o) for o in batch if tenant == acme)
    made = Ticket.objects.bulk_create(
        [
            Ticket(
                tenant=t,
                order=o,
                customer=c,
                message="bench",
                currency="USD",
                created_by=user,
                status=Ticket.Status.ESCALATED,
            )
            for t, c, o in made_orders[:tickets]
        ],
        batch_size=2000,
    )
    TraceEvent.objects.bulk_create(
        [
            TraceEvent(ticket=t, trace_id=t.trace_id, seq=k + 1, span="tool", status="ok")
            for t in made
            for k in range(events_per_ticket)
        ],
        batch_size=5000,
    )
    return Order.objects.count(), Ticket.objects.count(), TraceEvent.objects.count()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tickets", type=int, default=20, help="tickets filed per measurement")
    parser.add_argument("--orders", type=int, default=20000, help="other orders added for the large measurement")
    parser.add_argument("--other-tickets", type=int, default=10000, help="other tickets added")
    parser.add_argument("--events", type=int, default=10, help="trace events per other ticket")
    args = parser.parse_args()

    from django.conf import settings

    with scratch_database("agent_bench") as support:
        from ledger.models import Order
        from refundagent.models import Ticket, TraceEvent

        measure(2, support)  # warm-up: imports, caches
        rows = [
            (
                "few",
                Order.objects.count(),
                Ticket.objects.count(),
                TraceEvent.objects.count(),
                measure(args.tickets, support),
            )
        ]
        sizes = grow(args.orders, args.other_tickets, args.events)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
        rows.append(("many", *sizes, measure(args.tickets, support)))

    database = "embedded PostgreSQL" if settings.DATABASE_EMBEDDED else "PostgreSQL (DATABASE_URL)"
    print(
        f"agent runtime overhead, offline provider, {database}, {args.tickets} tickets per row "
        "(filing -> approval_required)"
    )
    header = (
        f"{'db size':8} {'orders':>7} {'tickets':>7} {'events':>8} | {'ms/ticket':>9} {'q/ticket':>8} "
        f"{'q/ticket max':>12} | {'q filing+claim':>14} | {'steps':>5} {'ms/step':>7} {'q/step':>6} "
        f"{'q/step max':>10} {'q last step':>11}"
    )
    print(header)
    print("-" * len(header))
    for name, orders, tickets, events, r in rows:
        print(
            f"{name:8} {orders:>7} {tickets:>7} {events:>8} | {r['ms_ticket']:>9.1f} {r['q_ticket']:>8.0f} "
            f"{r['q_ticket_max']:>12} | {r['q_setup']:>14.0f} | {r['steps']:>5} {r['ms_step']:>7.1f} "
            f"{r['q_step']:>6.0f} {r['q_step_max']:>10} {r['q_decision']:>11.0f}"
        )
    step = max(r["q_step"] for *_, r in rows)
    worst_step = max(r["q_step_max"] for *_, r in rows)
    worst_ticket = max(r["q_ticket_max"] for *_, r in rows)
    constant = rows[0][-1]["q_ticket_max"] == rows[1][-1]["q_ticket_max"]
    ok = step <= QUERIES_PER_STEP_MAX and worst_ticket <= QUERIES_PER_TICKET_MAX and constant
    print(
        f"targets: <= {QUERIES_PER_STEP_MAX} queries per step (median {step:.0f}; the heaviest, {worst_step}, is the "
        f"runtime's decision: kill switch, policy, ledger, draft, approval, ticket, run, trace in one transaction), "
        f"<= {QUERIES_PER_TICKET_MAX} per ticket "
        f"(worst {worst_ticket}), constant in the database size ({'yes' if constant else 'no'}): "
        f"{'PASS' if ok else 'FAIL'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
