"""Inbound email: Postmark posts per second accepted (the ticket stored, its agent run queued on the
broker), and the answer time, against a real server process.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/refundagent CELERY_BROKER_URL=redis://127.0.0.1:6379/0 \
        .venv/bin/python benchmarks/inbox.py [--rate 100] [--seconds 10] [--clients 8] [--gunicorn-workers 2]

Starts gunicorn (production-like settings, DEBUG off) on 127.0.0.1 at a free port, on a database
of its own (`<name>_inbox`, created when missing, seeded with the demo), with acme's support
address set. Client threads post Postmark inbound JSON (basic auth, Postmark's SPF verdict) from
the demo customer, each with its own Message-ID, paced at --rate posts a second for --seconds; a
second, unpaced phase measures the most the server accepts. Every accepted post is checked: one
ticket `source: "email"`, queued, per post. No Celery worker runs: "queued" means handed to the
broker (the outbox's publish after commit); the queue is purged at the end. The goal is a median
under 50 ms at 100 posts a second.
"""

import argparse
import base64
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import (  # noqa: E402
    BENCH_ENV,
    ROOT,
    database_ensure,
    database_url,
    db_name,
    django_setup,
    p90,
    settings_module,
    url_with_db,
)

PYTHON_BIN = Path(sys.executable).parent
SECRET = "bench:inbox-webhook-secret"
INBOX = "support@acme.example"
SENDER = "jane.doe@example.com"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def payload(run: str, n: int) -> bytes:
    """Postmark's inbound JSON, as it posts it (docs/inbox.md), from the demo customer."""
    return json.dumps(
        {
            "From": SENDER,
            "FromFull": {"Email": SENDER, "Name": "Jane Doe", "MailboxHash": ""},
            "To": INBOX,
            "ToFull": [{"Email": INBOX, "Name": "", "MailboxHash": ""}],
            "CcFull": [],
            "BccFull": [],
            "OriginalRecipient": INBOX,
            "Subject": f"Refund for my order ({run} #{n})",
            "MessageID": str(uuid.uuid4()),
            "Date": "Sun, 29 Nov 2026 01:00:00 +0000",
            "TextBody": "My order arrived broken. Please refund it.\n\nJane",
            "HtmlBody": "",
            "StrippedTextReply": "",
            "Headers": [
                {"Name": "Return-Path", "Value": f"<{SENDER}>"},
                {"Name": "Received-SPF", "Value": f"Pass (sender SPF authorized) envelope-from={SENDER}"},
                {"Name": "Message-ID", "Value": f"<{run}-{n}@mail.example.com>"},
            ],
            "Attachments": [],
        }
    ).encode()


def post_all(url: str, bodies: list[bytes], clients: int, rate: float | None) -> tuple[list[float], list[str], float]:
    """Post every body; paced at `rate` a second when given (each post at its slot), else as fast
    as `clients` threads go. Returns the answer times (ms), the errors and the elapsed seconds."""
    import requests

    auth = {
        "Authorization": "Basic " + base64.b64encode(SECRET.encode()).decode(),
        "Content-Type": "application/json",
        # As behind the load balancer production runs behind (HTTPS redirect otherwise).
        "X-Forwarded-Proto": "https",
    }
    latencies, errors, lock = [], [], threading.Lock()
    next_index = iter(range(len(bodies)))
    start = time.monotonic() + 0.2

    def worker():
        session = requests.Session()
        while True:
            with lock:
                i = next(next_index, None)
            if i is None:
                return
            if rate:
                delay = start + i / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            began = time.monotonic()
            try:
                response = session.post(url, data=bodies[i], headers=auth, timeout=30)
                status = response.status_code
            except requests.RequestException as exc:
                status = f"{type(exc).__name__}"
            took = (time.monotonic() - began) * 1000
            with lock:
                if status == 200:
                    latencies.append(took)
                else:
                    errors.append(f"post {i}: {status}")

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies, errors, time.monotonic() - start


def report(name: str, latencies: list[float], errors: list[str], elapsed: float, wanted: int):
    accepted = len(latencies)
    line = f"{name}: {accepted}/{wanted} accepted in {elapsed:.1f} s = {accepted / elapsed:.1f} posts/s"
    if latencies:
        line += (
            f"; answer time median {statistics.median(latencies):.1f} ms, p90 {p90(latencies):.1f} ms, "
            f"max {max(latencies):.1f} ms"
        )
    print(line)
    for error in errors[:5]:
        print("   error:", error)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=100, help="posts a second in the paced phase")
    parser.add_argument("--seconds", type=float, default=10, help="length of the paced phase")
    parser.add_argument("--burst", type=int, default=500, help="posts in the unpaced phase (0: skip it)")
    parser.add_argument("--clients", type=int, default=8, help="client threads")
    parser.add_argument("--gunicorn-workers", type=int, default=2)
    args = parser.parse_args()

    url = url_with_db(database_url(), db_name(database_url()) + "_inbox")
    database_ensure(url)
    broker = os.environ.get("CELERY_BROKER_URL", "")
    if not broker.startswith("redis://"):
        raise SystemExit("set CELERY_BROKER_URL=redis://host:port/n: accepted means queued on the broker")
    django_setup(url, AGENT_PROVIDER="offline", ANYMAIL_WEBHOOK_SECRET=SECRET)
    from django.core.management import call_command

    call_command("seed_demo")
    call_command("inbox_address", "--tenant", "acme", INBOX, stdout=open(os.devnull, "w"))
    from django.db import connection

    from refundagent.models import Ticket

    connection.close()
    run = f"INBOX{uuid.uuid4().hex[:8].upper()}"
    env = {
        **os.environ,
        **BENCH_ENV,
        "DATABASE_URL": url,
        "CELERY_BROKER_URL": broker,
        "ANYMAIL_WEBHOOK_SECRET": SECRET,
        "AGENT_PROVIDER": "offline",
        "DJANGO_SETTINGS_MODULE": settings_module(),
    }
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"{run.lower()}-gunicorn.log"
    out = open(log, "w")
    server = subprocess.Popen(
        [
            str(PYTHON_BIN / "gunicorn"),
            "refundagent.config.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(args.gunicorn_workers),
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(f"stopped by signal {signum}"))
    endpoint = f"{base}/anymail/postmark/inbound/"
    try:
        import requests

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                requests.get(f"{base}/api/health", timeout=2)
                break
            except requests.RequestException:
                time.sleep(0.3)
        else:
            raise SystemExit(f"gunicorn did not answer on {base} (log {log})")
        warm, warm_errors, _ = post_all(endpoint, [payload(run + "W", i) for i in range(20)], 2, None)
        if warm_errors:
            raise SystemExit(f"warm-up failed: {warm_errors[:3]} (log {log})")
        before = Ticket.objects.filter(source="email").count()
        connection.close()

        paced_n = int(args.rate * args.seconds)
        load = [os.getloadavg()]
        paced = post_all(endpoint, [payload(run, i) for i in range(paced_n)], args.clients, args.rate)
        load.append(os.getloadavg())
        burst = post_all(endpoint, [payload(run + "B", i) for i in range(args.burst)], args.clients, None)
        load.append(os.getloadavg())
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=20)
        try:
            from celery import current_app

            purged = current_app.control.purge()
        except Exception as exc:  # noqa: BLE001 - reported only
            purged = f"not purged: {exc}"

    filed = Ticket.objects.filter(source="email").count() - before
    # the warm-up's markers start with run too ("<run>W"): count only the measured posts
    queued = (
        Ticket.objects.filter(source="email", status="queued", message__contains=run)
        .exclude(message__contains=run + "W")
        .count()
    )
    print(
        f"\ninbound email: gunicorn {args.gunicorn_workers} sync workers, {args.clients} client threads, "
        f"PostgreSQL {db_name(url)}, broker {broker} (runs queued, no worker; purged after: {purged})"
    )
    report(f"paced at {args.rate:.0f}/s", *paced, paced_n)
    if args.burst:
        report("unpaced", *burst, args.burst)
    print(f"tickets filed {filed} (expected {len(paced[0]) + len(burst[0])}), of them queued: {queued}")
    print(
        "load average (1, 5, 15 min) before/after paced/after unpaced: "
        + " | ".join(f"{a:.2f} {b:.2f} {c:.2f}" for a, b, c in load)
    )
    return 0 if filed == len(paced[0]) + len(burst[0]) and not paced[1] and not burst[1] else 1


if __name__ == "__main__":
    raise SystemExit(main())
