"""Inbound email: Postmark posts per second accepted (the ticket stored, its agent run queued on the
broker), and the answer time, against a real server process.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/refundagent CELERY_BROKER_URL=redis://127.0.0.1:6379/0 \
        .venv/bin/python benchmarks/inbox.py [--rate 100] [--seconds 10] [--clients 8] [--gunicorn-workers 2] \
        [--compare ../main --rounds 2]

Starts gunicorn (production-like settings, DEBUG off) on 127.0.0.1 at a free port, on a database
of its own (`<name>_inbox`, created when missing, seeded with the demo), with acme's support
address set. Client threads (this process; the server is its own) post Postmark inbound JSON
(basic auth, Postmark's SPF verdict) from the demo customer, each with its own Message-ID, paced
at --rate posts a second for --seconds; a second, unpaced phase measures the most the server
accepts. Every accepted post is checked: one ticket `source: "email"`, queued, per post, and one
agent run waiting on the broker per post (no Celery worker runs; that queue is purged at the end).

Printed per phase: posts/s, answer time median/p90/max, and the CPU each post cost the server
(gunicorn), its PostgreSQL backends and the client; once per server, the SQL queries of one post.
With --compare DIR a second gunicorn serves the code checked out in DIR (e.g. a worktree of main)
on the same database and broker, and the phases take turns between the two, --rounds times with
the order swapped each round, so both see the same load. The goal is a median under 50 ms at 100
posts a second.
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
    cpu_seconds,
    database_ensure,
    database_url,
    db_name,
    django_setup,
    p90,
    settings_module,
    url_with_db,
)
from load import PYTHON_BIN, free_port  # noqa: E402

SECRET = "bench:inbox-webhook-secret"
INBOX = "support@acme.example"
SENDER = "jane.doe@example.com"


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


# One post through Django's test client in the server's own code (cwd), its SQL counted: the
# server processes keep no query log with DEBUG off.
QUERIES_OF_ONE_POST = """
import base64, json, sys, django
django.setup()
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
body, secret = sys.argv[1].encode(), sys.argv[2]
headers = {"HTTP_AUTHORIZATION": "Basic " + base64.b64encode(secret.encode()).decode(), "HTTP_X_FORWARDED_PROTO": "https"}
with CaptureQueriesContext(connection) as queries:
    status = Client().post("/anymail/postmark/inbound/", data=body, content_type="application/json", **headers).status_code
print(json.dumps({"status": status, "queries": [q["sql"] for q in queries.captured_queries]}))
"""


class Server:
    """One gunicorn serving the code checked out at `root`, in its own process group."""

    def __init__(self, name: str, root: Path, env: dict, workers: int, run: str):
        self.name, self.root, self.env = name, root, env
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        self.endpoint = f"{self.base}/anymail/postmark/inbound/"
        self.log = Path(os.environ.get("TMPDIR", "/tmp")) / f"{run.lower()}-{name}-gunicorn.log"
        self.proc = subprocess.Popen(
            [str(PYTHON_BIN / "gunicorn"), "refundagent.config.wsgi:application", "--bind", f"127.0.0.1:{port}"]
            + ["--workers", str(workers), "--log-level", "warning"],
            cwd=root,
            env=env,
            stdout=open(self.log, "w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.results: dict[str, list] = {}

    def wait_up(self):
        """Until gunicorn answers at all (no worker or beat runs here, so /api/health says 503)."""
        import requests

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                requests.get(f"{self.base}/api/health", timeout=2)
                return
            except requests.RequestException:
                time.sleep(0.3)
        raise SystemExit(f"gunicorn did not answer on {self.base} (log {self.log})")

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
        self.proc.wait(timeout=20)

    def queries_per_post(self, body: bytes) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-c", QUERIES_OF_ONE_POST, body.decode(), SECRET],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            raise SystemExit(f"{self.name}: counting one post's queries failed:\n{done.stderr[-2000:]}")
        found = json.loads(done.stdout.strip().splitlines()[-1])
        if found["status"] != 200:
            raise SystemExit(f"{self.name}: one post answered {found['status']}")
        return found["queries"]

    def backend_pids(self) -> list[int]:
        """The PostgreSQL backends serving this server's workers (matched by their client ports)."""
        import psutil
        from django.db import connection

        ports = []
        for worker in psutil.Process(self.proc.pid).children(recursive=True):
            try:
                ports += [c.laddr.port for c in worker.net_connections(kind="tcp") if c.raddr and c.raddr.port == 5432]
            except psutil.NoSuchProcess:
                continue
        if not ports:
            return []
        with connection.cursor() as cursor:
            cursor.execute("SELECT pid FROM pg_stat_activity WHERE client_port = ANY(%s)", [ports])
            return [row[0] for row in cursor.fetchall()]


class BackendCPU(threading.Thread):
    """The CPU of a server's PostgreSQL backends over a phase. Backends come and go (a
    connection lives DATABASE_CONN_MAX_AGE seconds), so they are sampled every half second: one
    that ends between two samples loses only its last half second."""

    def __init__(self, server: "Server"):
        super().__init__(daemon=True)
        self.server, self.first, self.last, self.done = server, {}, {}, threading.Event()
        self.own = 0.0  # this process's CPU spent sampling, not posting
        self.sample(at_start=True)

    def sample(self, at_start: bool = False):
        began = time.thread_time()
        for pid in self.server.backend_pids():
            seconds = cpu_seconds(pid)
            if seconds:
                # a backend born during the phase spent all of its CPU in it
                self.first.setdefault(pid, seconds if at_start else 0.0)
                self.last[pid] = seconds
        self.own += time.thread_time() - began

    def run(self):
        from django.db import connection

        while not self.done.wait(0.5):
            self.sample()
        connection.close()

    def stop(self) -> float:
        self.done.set()
        self.join()
        self.sample()
        return sum(self.last[pid] - self.first[pid] for pid in self.last)


def phase_run(server: Server, bodies: list[bytes], clients: int, rate: float | None) -> dict:
    """Post `bodies` to `server`; the answer times and the CPU the server, its database backends
    and this client spent on them."""
    server_cpu, client_cpu = cpu_seconds(server.proc.pid), time.process_time()
    backends = BackendCPU(server)
    backends.start()
    latencies, errors, elapsed = post_all(server.endpoint, bodies, clients, rate)
    database_cpu = backends.stop()
    client_cpu = time.process_time() - client_cpu - backends.own
    used = [cpu_seconds(server.proc.pid) - server_cpu, database_cpu, client_cpu]
    return {"latencies": latencies, "errors": errors, "elapsed": elapsed, "wanted": len(bodies), "cpu": used}


def merged(parts: list[dict]) -> dict:
    return {
        "latencies": [x for p in parts for x in p["latencies"]],
        "errors": [x for p in parts for x in p["errors"]],
        "elapsed": sum(p["elapsed"] for p in parts),
        "wanted": sum(p["wanted"] for p in parts),
        "cpu": [sum(p["cpu"][i] for p in parts) for i in range(3)],
    }


def report(name: str, result: dict):
    latencies, errors, elapsed = result["latencies"], result["errors"], result["elapsed"]
    accepted = len(latencies)
    line = f"{name}: {accepted}/{result['wanted']} accepted in {elapsed:.1f} s = {accepted / elapsed:.1f} posts/s"
    if latencies:
        server, database, client = (1000 * seconds / accepted for seconds in result["cpu"])
        line += (
            f"; answer time median {statistics.median(latencies):.1f} ms, p90 {p90(latencies):.1f} ms, "
            f"max {max(latencies):.1f} ms; CPU a post: gunicorn {server:.1f} ms, PostgreSQL {database:.1f} ms, "
            f"client {client:.1f} ms"
        )
    print(line)
    for error in errors[:5]:
        print("   error:", error)


def broker_queue_length(queue: str, purge: bool = False) -> int:
    """Messages waiting on the broker's `queue` (purged when asked: no worker runs here)."""
    from celery import current_app

    with current_app.connection_for_write() as conn:
        channel = conn.default_channel
        return channel.queue_purge(queue) if purge else channel.queue_declare(queue, passive=True).message_count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=100, help="posts a second in the paced phase")
    parser.add_argument("--seconds", type=float, default=10, help="length of the paced phase")
    parser.add_argument("--burst", type=int, default=500, help="posts in the unpaced phase (0: skip it)")
    parser.add_argument("--clients", type=int, default=8, help="client threads")
    parser.add_argument("--gunicorn-workers", type=int, default=2)
    parser.add_argument("--compare", type=Path, help="a checkout whose code a second server runs, turn about")
    parser.add_argument("--rounds", type=int, default=1, help="turns of each phase per server")
    args = parser.parse_args()

    url = url_with_db(database_url(), db_name(database_url()) + "_inbox")
    database_ensure(url)
    broker = os.environ.get("CELERY_BROKER_URL", "")
    if not broker.startswith("redis://"):
        raise SystemExit("set CELERY_BROKER_URL=redis://host:port/n: accepted means queued on the broker")
    django_setup(url, AGENT_PROVIDER="offline", ANYMAIL_WEBHOOK_SECRET=SECRET)
    from celery import current_app
    from django.core.management import call_command

    call_command("seed_demo")
    call_command("inbox_address", "--tenant", "acme", INBOX, stdout=open(os.devnull, "w"))
    from django.db import connection

    from refundagent.models import Ticket

    queue = current_app.amqp.router.route({}, "refundagent.tasks.agent_run_ticket_task")["queue"].name
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
    roots = [("this", ROOT)] + ([("compare", args.compare.resolve())] if args.compare else [])
    servers = [Server(name, root, env, args.gunicorn_workers, run) for name, root in roots]
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(f"stopped by signal {signum}"))
    load = []
    try:
        for server in servers:
            server.wait_up()
            server.queries = server.queries_per_post(payload(run + "Q" + server.name, 0))
            _warm, warm_errors, _ = post_all(server.endpoint, [payload(run + "W", i) for i in range(20)], 2, None)
            if warm_errors:
                raise SystemExit(f"warm-up failed: {warm_errors[:3]} (log {server.log})")
        before = Ticket.objects.filter(source="email").count()
        on_broker_before = broker_queue_length(queue)
        connection.close()

        paced_n = int(args.rate * args.seconds)
        load.append(os.getloadavg())
        for turn in range(args.rounds):
            order = servers if turn % 2 == 0 else servers[::-1]
            for server in order:
                bodies = [payload(f"{run}P{server.name}{turn}", i) for i in range(paced_n)]
                server.results.setdefault("paced", []).append(phase_run(server, bodies, args.clients, args.rate))
            load.append(os.getloadavg())
            if args.burst:
                for server in order:
                    bodies = [payload(f"{run}B{server.name}{turn}", i) for i in range(args.burst)]
                    server.results.setdefault("unpaced", []).append(phase_run(server, bodies, args.clients, None))
                load.append(os.getloadavg())
        connection.close()
        on_broker = broker_queue_length(queue) - on_broker_before
    finally:
        for server in servers:
            server.stop()
        try:
            purged = broker_queue_length(queue, purge=True)
        except Exception as exc:  # noqa: BLE001 - reported only
            purged = f"not purged: {exc}"

    accepted = sum(len(p["latencies"]) for server in servers for parts in server.results.values() for p in parts)
    failed = any(p["errors"] for server in servers for parts in server.results.values() for p in parts)
    filed = Ticket.objects.filter(source="email").count() - before
    # the warm-up's and the query count's markers start with run too: count only the measured posts
    queued = (
        Ticket.objects.filter(source="email", status="queued", message__contains=run)
        .exclude(message__contains=run + "W")
        .exclude(message__contains=run + "Q")
        .count()
    )
    print(
        f"\ninbound email: gunicorn {args.gunicorn_workers} sync workers per server, {args.clients} client threads, "
        f"PostgreSQL {db_name(url)}, broker {broker} queue {queue!r} (no worker; purged after: {purged})"
    )
    for server in servers:
        print(f"\n[{server.name}] {server.root}: {len(server.queries)} SQL statements a post")
        for sql in server.queries:
            print(f"   {sql[:100]}")
        report(f"[{server.name}] paced at {args.rate:.0f}/s", merged(server.results["paced"]))
        if args.burst:
            report(f"[{server.name}] unpaced", merged(server.results["unpaced"]))
    print(
        f"\ntickets filed {filed} (expected {accepted}), of them queued: {queued}; "
        f"agent runs on the broker: {on_broker} (expected {accepted})"
    )
    print(
        "load average (1, 5, 15 min) at the start and after each phase: "
        + " | ".join(f"{a:.2f} {b:.2f} {c:.2f}" for a, b, c in load)
    )
    return 0 if filed == accepted == queued == on_broker and not failed else 1


if __name__ == "__main__":
    raise SystemExit(main())
