"""End-to-end load: tickets filed over HTTP against gunicorn, Redis, PostgreSQL and 2 Celery workers.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/refundagent CELERY_BROKER_URL=redis://127.0.0.1:6379/0 \
        python benchmarks/load.py [--tickets 200 --clients 4]

Starts gunicorn (production-like settings: DEBUG off, a load balancer's X-Forwarded-Proto) on
127.0.0.1 at a free port and two Celery workers (one process each), all on DATABASE_URL's
database (migrated, demo data) and CELERY_BROKER_URL; the agent runs on the offline provider.
`--clients` threads file N tickets, each on an order of its own (made here for the run), with
POST /api/tickets; the ticket's stop time (the decision's updated_at) against the moment its
POST was sent gives the latency from filing to approval_required. Reports tickets per second
(first POST to last approval_required), p50 and p95 latency, and every error (HTTP, and tickets
that stopped otherwise or not in time).

Then, with the servers stopped, the ledger: `ledger_refund_issue` (lock the order, check the
cap, write the entry) against a raw single-row INSERT + COMMIT, on the same PostgreSQL from the
same number of client threads; prints both throughputs and the ratio.

Everything it starts is stopped at the end, and every wait is bounded. It asserts nothing.
"""

import argparse
import importlib.util
import io
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import (  # noqa: E402
    BENCH_ENV,
    ROOT,
    database_ensure,
    database_url,
    db_name,
    demo_orders_create,
    django_setup,
    libpq_url,
    settings_module,
    url_with_db,
)  # noqa: E402

PYTHON_BIN = Path(sys.executable).parent
MESSAGE = "My order arrived broken, please refund $120."


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wsgi_module() -> str:
    for name in ("refundagent.config.wsgi", "refundagent.wsgi"):
        try:
            if importlib.util.find_spec(name) is not None:
                return name + ":application"
        except ModuleNotFoundError:
            continue
    raise SystemExit("no WSGI module found")


class Processes:
    """The servers this run started, each in its own process group, stopped at the end."""

    def __init__(self):
        self.procs: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, args: list[str], env: dict, log: Path) -> subprocess.Popen:
        out = open(log, "w")
        proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append((name, proc))
        return proc

    def stop(self):
        for _name, proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for _name, proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        self.procs.clear()


def load_orders(run: str, n: int) -> list[tuple[str, str]]:
    """n fresh orders, one per ticket and each of its own customer paid by card: tickets do not
    queue on one order's lock, and no customer trips the per-customer refund risk rule (a real
    burst comes from many customers). Returns (order, customer) external ids."""
    from django.apps import apps

    Customer, PaymentMethod = apps.get_model("ledger", "Customer"), apps.get_model("ledger", "PaymentMethod")
    OrderItem, Payment = apps.get_model("ledger", "OrderItem"), apps.get_model("ledger", "Payment")
    orders = demo_orders_create([f"{run}-{i}" for i in range(n)], total="120.00", days_old=3)
    tenant = orders[0].tenant
    customers = Customer.objects.bulk_create(
        [Customer(tenant=tenant, external_id=f"CUST-{o.external_id}", name=f"Load {o.pk}") for o in orders]
    )
    cards = PaymentMethod.objects.bulk_create(
        [PaymentMethod(customer=c, external_id="card_4242", kind="card", brand="visa", last4="4242") for c in customers]
    )
    for order, customer in zip(orders, customers, strict=True):
        order.customer = customer
    type(orders[0]).objects.bulk_update(orders, ["customer"])
    OrderItem.objects.bulk_create(
        [
            OrderItem(order=o, line_no=1, item_id=f"IT-{o.pk}", name="Headphones", price=Decimal("120.00"))
            for o in orders
        ]
    )
    Payment.objects.bulk_create(
        [
            Payment(
                order=o,
                payment_method=card,
                method="card",
                card_brand="visa",
                card_last4="4242",
                payment_ref=f"pi_load{o.pk:010d}",
                amount=Decimal("120.00"),
                currency="USD",
            )
            for o, card in zip(orders, cards, strict=True)
        ]
    )
    return [(o.external_id, c.external_id) for o, c in zip(orders, customers, strict=True)]


def api_token() -> str:
    from django.core.management import call_command

    out = io.StringIO()
    call_command("create_api_token", "acme-support", stdout=out)
    return out.getvalue().strip().splitlines()[-1].strip()


def ticket_post(session, base: str, token: str, order: str, customer: str) -> tuple[int | None, str]:
    """POST one benchmark ticket on `session`: (its id, "") when filed, else (None, the error)."""
    import requests

    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json", "X-Forwarded-Proto": "https"}
    body = {"order": order, "customer": customer, "message": MESSAGE, "requested_amount": "120.00"}
    try:
        response = session.post(f"{base}/api/tickets", data=json.dumps(body), headers=headers, timeout=30)
    except requests.RequestException as exc:
        return None, f"{order}: {type(exc).__name__}: {exc}"
    if response.status_code == 201:
        return response.json()["id"], ""
    return None, f"{order}: HTTP {response.status_code} {response.text[:200]}"


def file_tickets(
    base: str, token: str, orders: list[tuple[str, str]], clients: int, deadline: float
) -> tuple[list, list]:
    """POST a ticket per (order, customer) from `clients` threads. Returns [(ticket id, sent at)] and the errors."""
    import requests

    filed, errors, lock = [], [], threading.Lock()
    todo = list(enumerate(orders))

    def worker():
        session = requests.Session()
        while time.monotonic() < deadline:
            with lock:
                if not todo:
                    return
                _, (order, customer) = todo.pop(0)
            sent = time.time()
            ticket_id, error = ticket_post(session, base, token, order, customer)
            with lock:
                if ticket_id is not None:
                    filed.append((ticket_id, sent))
                else:
                    errors.append(error)

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.1, deadline - time.monotonic()))
    return filed, errors


def wait_stopped(ids: list[int], deadline: float) -> dict[int, tuple[str, float]]:
    """Poll until every ticket has left queued/running (or the deadline): id -> (status, stopped at)."""
    from django.apps import apps
    from django.db import connection

    Ticket = apps.get_model("refundagent", "Ticket")
    while True:
        rows = {
            pk: (status, at.timestamp())
            for pk, status, at in Ticket.objects.filter(pk__in=ids).values_list("pk", "status", "updated_at")
        }
        open_ = [pk for pk, (status, _) in rows.items() if status in ("queued", "running")]
        if not open_ or time.monotonic() > deadline:
            return rows
        connection.close()  # a fresh snapshot each poll, no long transaction
        time.sleep(0.25)


def http_wait(url: str, deadline: float) -> bool:
    import requests

    while time.monotonic() < deadline:
        try:
            # Up once the workers answer: no beat runs here, so /api/health stays 503 for it.
            response = requests.get(url, timeout=2)
            if response.status_code == 200 or response.json().get("worker") == "ok":
                return True
        except requests.RequestException:
            pass
        time.sleep(0.3)
    return False


# --- the ledger -----------------------------------------------------------------------------


def ledger_bench(url: str, run: str, ops: int, threads: int) -> dict:
    import psycopg
    from django.apps import apps
    from django.db import connection as main_connection
    from django.db import connections

    from ledger.services import ledger_refund_issue

    card = apps.get_model("ledger", "PaymentMethod").objects.get(
        customer__tenant__slug="acme", customer__external_id="CUST-1001", external_id="card_4242"
    )
    orders = demo_orders_create([f"{run}-L{i}" for i in range(ops)], total="10.00", days_old=1)
    main_connection.close()

    def timed(per_thread) -> float:
        chunks = [list(range(k, ops, threads)) for k in range(threads)]
        barrier = threading.Barrier(threads + 1)
        failures = []

        def body(chunk):
            try:
                per_thread(chunk, barrier)
            except Exception as exc:  # reported, never hidden
                failures.append(repr(exc))
                barrier.abort()

        workers = [threading.Thread(target=body, args=(c,)) for c in chunks]
        for w in workers:
            w.start()
        barrier.wait(timeout=60)
        started = time.perf_counter()
        for w in workers:
            w.join(600)
        if failures:
            raise SystemExit(f"ledger benchmark failed: {failures[:3]}")
        return ops / (time.perf_counter() - started)

    def ledger_thread(chunk, barrier):
        mine = [orders[i] for i in chunk]
        ledger_refund_issue(
            order=mine[0],
            amount="1.00",
            currency="USD",
            destination=card,
            idempotency_key=f"bench:{run}:warm:{chunk[0]}",
            source="import",
            reason="benchmark",
        )
        barrier.wait(timeout=60)
        for order in mine:
            ledger_refund_issue(
                order=order,
                amount="5.00",
                currency="USD",
                destination=card,
                idempotency_key=f"bench:{run}:{order.pk}",
                source="import",
                reason="benchmark",
            )
        connections.close_all()

    def raw_thread(chunk, barrier):
        with psycopg.connect(libpq_url(url), autocommit=True) as conn:
            conn.execute("INSERT INTO bench_raw_insert (k, amount) VALUES (%s, %s)", (f"{run}:warm:{chunk[0]}", "1.00"))
            barrier.wait(timeout=60)
            for i in chunk:
                # autocommit: each INSERT is its own transaction, committed (one row per commit)
                conn.execute("INSERT INTO bench_raw_insert (k, amount) VALUES (%s, %s)", (f"{run}:{i}", "5.00"))

    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS bench_raw_insert (id bigserial PRIMARY KEY, k text NOT NULL, "
            "amount numeric(12,2) NOT NULL, created_at timestamptz NOT NULL DEFAULT now())"
        )
    raw = timed(raw_thread)
    ledger = timed(ledger_thread)
    return {"ledger": ledger, "raw": raw}


# --- main -------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tickets", type=int, default=200)
    parser.add_argument("--clients", type=int, default=4, help="client threads (HTTP filers, and the ledger's)")
    parser.add_argument("--gunicorn-workers", type=int, default=2)
    parser.add_argument("--celery-workers", type=int, default=2)
    parser.add_argument("--ledger-ops", type=int, default=1000, help="refunds (and raw inserts) in the ledger part")
    parser.add_argument("--timeout", type=float, default=600, help="seconds for the whole HTTP part, at most")
    args = parser.parse_args()

    # A database of its own ("<name>_load", created when missing): the orders made here for every
    # run would otherwise pile up in the database side_by_side.py measures as "small".
    url = url_with_db(database_url(), db_name(database_url()) + "_load")
    database_ensure(url)
    broker = os.environ.get("CELERY_BROKER_URL", "")
    if not broker.startswith("redis://"):
        raise SystemExit("set CELERY_BROKER_URL=redis://host:port/n: the load test runs real Celery workers")
    django_setup(url, AGENT_PROVIDER="offline")
    from django.core.management import call_command

    call_command("seed_demo")
    run = f"LOAD{uuid.uuid4().hex[:8].upper()}"
    orders = load_orders(run, args.tickets + 1)
    token = api_token()
    from django.db import connection

    connection.close()

    env = {
        **os.environ,
        **BENCH_ENV,
        "DATABASE_URL": url,
        "CELERY_BROKER_URL": broker,
        "AGENT_PROVIDER": "offline",
        "DJANGO_SETTINGS_MODULE": settings_module(),
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("AGENT_SCRIPT", None)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    logs = Path(os.environ.get("TMPDIR", "/tmp")) / f"load-{run}"
    logs.mkdir(parents=True, exist_ok=True)
    procs = Processes()
    # A SIGTERM (e.g. from `timeout`) unwinds through the finally below, which stops the servers.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(f"stopped by signal {signum}"))
    started_all = time.monotonic()
    deadline = started_all + args.timeout
    try:
        from celery import current_app

        try:
            purged = current_app.control.purge()  # leftovers of earlier runs on this broker would skew it
        except Exception as exc:  # noqa: BLE001 - reported, and the run goes on
            purged = f"not purged: {exc}"
        procs.start(
            "gunicorn",
            [
                str(PYTHON_BIN / "gunicorn"),
                wsgi_module(),
                "--bind",
                f"127.0.0.1:{port}",
                "--workers",
                str(args.gunicorn_workers),
                "--access-logfile",
                "-",
                "--log-level",
                "warning",
            ],
            env,
            logs / "gunicorn.log",
        )
        for k in range(args.celery_workers):
            procs.start(
                f"celery{k}",
                [
                    str(PYTHON_BIN / "celery"),
                    "-A",
                    "refundagent",
                    "worker",
                    "--pool",
                    "prefork",
                    "--concurrency",
                    "1",
                    "-n",
                    f"{run.lower()}-{k}@%h",
                    "--without-gossip",
                    "--without-mingle",
                    "--loglevel",
                    "warning",
                ],
                env,
                logs / f"celery{k}.log",
            )
        if not http_wait(f"{base}/api/health", min(deadline, time.monotonic() + 60)):
            raise SystemExit(f"gunicorn did not answer on {base} (logs in {logs})")
        # One ticket first: proves the workers consume, and warms them; not measured.
        warm, warm_errors = file_tickets(base, token, orders[:1], 1, deadline)
        if warm_errors or not warm:
            raise SystemExit(f"warm-up ticket failed: {warm_errors}")
        warm_state = wait_stopped([warm[0][0]], min(deadline, time.monotonic() + 90))
        if warm_state.get(warm[0][0], ("?",))[0] != "approval_required":
            raise SystemExit(f"warm-up ticket ended {warm_state}; logs in {logs}")

        t0 = time.time()
        filed, errors = file_tickets(base, token, orders[1:], args.clients, deadline)
        filed_at = time.time()
        state = wait_stopped([pk for pk, _ in filed], deadline)
    finally:
        procs.stop()
    elapsed_all = time.monotonic() - started_all

    latencies, stopped_at = [], []
    sent = dict(filed)
    for pk, (status, at) in state.items():
        if status == "approval_required":
            latencies.append((at - sent[pk]) * 1000)
            stopped_at.append(at)
        else:
            errors.append(f"ticket {pk}: {status}")
    missing = len(filed) - len(state)
    if missing:
        errors.append(f"{missing} filed ticket(s) not found")
    ok = len(latencies)
    span = (max(stopped_at) - t0) if stopped_at else float("nan")
    latencies.sort()
    print(
        f"\nend-to-end load: {args.tickets} tickets over HTTP, {args.clients} client threads, gunicorn "
        f"{args.gunicorn_workers} sync workers, {args.celery_workers} Celery workers (prefork, 1 process each), "
        f"offline provider, PostgreSQL {db_name(url)}, broker {broker} (purged: {purged})"
    )
    print(
        f"filing took {filed_at - t0:.1f} s ({len(filed) / (filed_at - t0):.1f} POST/s); "
        f"whole HTTP part {elapsed_all:.0f} s"
    )
    if ok:
        p50 = statistics.median(latencies)
        p95 = latencies[min(len(latencies) - 1, int(round(0.95 * len(latencies))) - 1)]
        print(
            f"tickets_per_second={ok / span:.1f} p50_ms={p50:.0f} p95_ms={p95:.0f} "
            f"approval_required={ok} errors={len(errors)}"
        )
    else:
        print(f"tickets_per_second=0 approval_required=0 errors={len(errors)}")
    for line in errors[:20]:
        print(f"  error: {line}")
    if len(errors) > 20:
        print(f"  ... and {len(errors) - 20} more")
    print(f"(server logs: {logs})", flush=True)

    figures = ledger_bench(url, run, args.ledger_ops, args.clients)
    ratio = figures["ledger"] / figures["raw"]
    print(f"\nledger: {args.ledger_ops} operations each, {args.clients} client threads, one process, same server")
    print(
        f"ledger_refund_issue: {figures['ledger']:.0f} refunds/s; raw single-row INSERT+COMMIT: "
        f"{figures['raw']:.0f} rows/s"
    )
    print(f"ledger_vs_raw_insert={ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
