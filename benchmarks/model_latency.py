"""Model latency: N tickets filed at once against a Messages API that takes seconds per turn.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/refundagent CELERY_BROKER_URL=redis://127.0.0.1:6379/8 \
        python benchmarks/model_latency.py [--tickets 100 --turn-seconds 1.5]

Runs the stack as docker-compose.yml does: gunicorn for the web, the agent's worker on the
`agent` queue (threads, 100 of them, a connection pool of 10), the money worker on `money`
(prefork, 2 processes), real PostgreSQL (DATABASE_URL's server, a database "<name>_latency" of
its own) and Redis (CELERY_BROKER_URL: the broker and the model-call slots). The agent talks to
its own fake Messages API (refundagent/tests/fake_anthropic.py, PlannedReplies), the `anthropic`
SDK unchanged: each turn takes --turn-seconds (the reply's second check, --check-seconds), answers as a model working the refund would
(order, payments, policy, then a draft), and reports prompt-cache usage as Anthropic does
(cache_creation_input_tokens the first time a prefix past --min-cacheable tokens is seen,
cache_read_input_tokens afterwards).

First one ticket alone (after a warm-up ticket): the floor. Then --tickets tickets filed at once
through POST /api/tickets, one client thread each. Prints tickets/s (first POST to the last
approval_required), p50 and p95 from filing to approval_required, the most runs in flight (agent
runs running at once, sampled) and model calls in flight (at the fake), tokens per ticket by
kind, the share of input read from the cache, USD per ticket at the configured model's list
prices (agent.providers.pricing), and last:

    model_latency tickets=N ok=K tickets_per_s=R in_flight_max=M floor_s=F cache_read_share=S usd_per_ticket=U

With --rate R the tickets are a steady stream instead: ticket i is due at t0 + i/R, filed by
--filers client processes of their own (the fake model runs in another), so neither the fake
nor the watcher here slows the arrival; it prints how late the POSTs left, the CPU of each of
the product's processes a ticket, and the share within 3x one ticket alone.

--agent-pool/--agent-concurrency/--pool-size run the agent's worker another way (e.g. prefork 2,
as before, for the comparison in docs/performance.md); --agent-workers starts several;
--model-cap sets the workers' model-call caps (installation and tenant); --gunicorn-threads
gives the web threads. Everything it starts is stopped at the
end, and every wait is bounded. It asserts nothing.
"""

import argparse
import os
import signal
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _bench import (  # noqa: E402
    BENCH_ENV,
    cpu_seconds,
    database_ensure,
    database_url,
    db_name,
    django_setup,
    settings_module,
    url_with_db,
)
from load import PYTHON_BIN, Processes, api_token, file_tickets, free_port, http_wait, load_orders, wsgi_module  # noqa: E402

MODEL = "claude-sonnet-5-5"


def celery(name: str, queue: str, pool: str, concurrency: int, run: str) -> list[str]:
    return [
        str(PYTHON_BIN / "celery"),
        "-A",
        "refundagent",
        "worker",
        "-Q",
        queue,
        f"--pool={pool}",
        f"--concurrency={concurrency}",
        "-n",
        f"{run.lower()}-{name}@%h",
        "--without-gossip",
        "--without-mingle",
        "--loglevel",
        "warning",
    ]


def watch(ids: list[int], deadline: float, in_flight: list[int]) -> dict[int, tuple[str, float]]:
    """Poll until every ticket left queued/running (or the deadline): id -> (status, stopped at),
    sampling how many runs are in flight."""
    from django.db import connection

    from refundagent.models import Ticket

    while True:
        rows = {
            pk: (status, at.timestamp())
            for pk, status, at in Ticket.objects.filter(pk__in=ids).values_list("pk", "status", "updated_at")
        }
        in_flight.append(sum(1 for status, _ in rows.values() if status == "running"))
        open_ = [pk for pk, (status, _) in rows.items() if status in ("queued", "running")]
        connection.close()
        if not open_ or time.monotonic() > deadline:
            return rows
        time.sleep(0.1)


def file_at_rate(
    base: str, token: str, todo: list[tuple[int, tuple[str, str]]], rate: float, t0: float, deadline: float
) -> tuple[list, list, list]:
    """POST ticket i at t0 + i/rate (time.time()) for each (i, order) of `todo`: a steady stream,
    not a burst, from a pool of client threads, so a slow answer does not delay the next ticket.
    Returns (ticket id, sent at), errors, and how late each POST left (seconds)."""
    import threading

    import requests
    from load import ticket_post

    filed, errors, late, lock = [], [], [], threading.Lock()
    todo = list(todo)

    def client():
        session = requests.Session()
        while True:
            with lock:
                if not todo:
                    return
                i, (order, customer) = todo.pop(0)
            due = t0 + i / rate
            time.sleep(max(0.0, due - time.time()))
            if time.time() > deadline:
                return
            sent = time.time()
            with lock:
                late.append(sent - due)
            ticket_id, error = ticket_post(session, base, token, order, customer)
            with lock:
                if ticket_id is not None:
                    filed.append((ticket_id, sent))
                else:
                    errors.append(error)

    # Enough clients that a few slow answers never hold back the schedule.
    threads = [threading.Thread(target=client) for _ in range(max(4, int(rate * 2)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.1, deadline - time.time()))
    return filed, errors, late


def filer_process(base, token, todo, rate, t0, deadline, conn):
    """A client process of its own: files its share of the stream and sends back what it got.
    Apart from the fake model and the watcher, so neither slows the arrival down."""
    conn.send(file_at_rate(base, token, todo, rate, t0, deadline))
    conn.close()


def file_in_processes(base, token, orders, rate, filers, deadline) -> tuple[list, list, list]:
    """The stream filed by `filers` processes, ticket i by process i % filers, all on one clock."""
    import multiprocessing

    spawn = multiprocessing.get_context("spawn")
    t0 = time.time() + 1.0 + 0.3 * filers  # the processes start (an interpreter each) before the first is due
    wall_deadline = time.time() + (deadline - time.monotonic())
    children = []
    for k in range(filers):
        todo = [(i, order) for i, order in enumerate(orders) if i % filers == k]
        mine, theirs = spawn.Pipe(duplex=False)
        proc = spawn.Process(target=filer_process, args=(base, token, todo, rate, t0, wall_deadline, theirs))
        proc.start()
        children.append((proc, mine))
    filed, errors, late = [], [], []
    for proc, mine in children:
        if mine.poll(max(0.1, deadline - time.monotonic())):
            got = mine.recv()
            filed += got[0]
            errors += got[1]
            late += got[2]
        else:
            errors.append(f"filer {proc.pid} sent nothing in time")
        proc.join(10)
        if proc.is_alive():
            proc.kill()
    return filed, errors, late


def fake_process(turn_seconds, check_seconds, min_cacheable, conn):
    """The fake Messages API in a process of its own (its CPU is neither the product's nor the
    client's): answers "url", "reset" (counts from here) and "stats"; "stop" ends it."""
    import django

    django.setup()  # the planned model reads the product's tool definitions (the parent's environment)
    from refundagent.tests.fake_anthropic import FakeAnthropic, PlannedReplies

    replies = PlannedReplies(turn_seconds=turn_seconds, check_seconds=check_seconds, min_cacheable_tokens=min_cacheable)
    fake = FakeAnthropic(responder=replies).start()
    while True:
        command = conn.recv()
        if command == "url":
            conn.send(fake.url)
        elif command == "reset":
            with replies.lock:
                replies.in_flight_max = 0
            fake.requests.clear()  # the recorded bodies are not needed here; keep the memory flat
            conn.send(replies.answered)
        elif command == "stats":
            fake.requests.clear()
            conn.send(
                {"answered": replies.answered, "in_flight_max": replies.in_flight_max, "refused": replies.refused}
            )
        elif command == "stop":
            fake.stop()
            conn.send("stopped")
            return


class FakeModel:
    """The parent's handle on fake_process."""

    def __init__(self, turn_seconds, check_seconds, min_cacheable):
        import multiprocessing

        spawn = multiprocessing.get_context("spawn")
        self.conn, theirs = spawn.Pipe()
        self.proc = spawn.Process(target=fake_process, args=(turn_seconds, check_seconds, min_cacheable, theirs))
        self.proc.start()
        self.url = self.ask("url")

    def ask(self, command):
        self.conn.send(command)
        if not self.conn.poll(60):
            raise SystemExit(f"the fake model did not answer {command!r}")
        return self.conn.recv()

    def stop(self):
        if self.proc.is_alive():
            try:
                self.ask("stop")
            except (OSError, EOFError, SystemExit):
                pass
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()


def usage_of(ids: list[int]) -> dict:
    from django.db.models import Sum

    from refundagent.models import AgentRun

    return AgentRun.objects.filter(ticket_id__in=ids).aggregate(
        input=Sum("input_tokens"),
        cache_write=Sum("cache_creation_input_tokens"),
        cache_read=Sum("cache_read_input_tokens"),
        output=Sum("output_tokens"),
        cost=Sum("cost_usd"),
        calls=Sum("iterations"),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tickets", type=int, default=100)
    parser.add_argument("--turn-seconds", type=float, default=1.5)
    # The reply's second check (agent.reply_check) asks for one word: time to first token, no
    # tool call to write. About a third of a working turn.
    parser.add_argument("--check-seconds", type=float, default=0.5)
    parser.add_argument("--min-cacheable", type=int, default=1024, help="the fake's minimum cacheable prefix")
    parser.add_argument("--agent-pool", default="threads", choices=["threads", "prefork", "gevent"])
    parser.add_argument("--agent-concurrency", type=int, default=100)
    parser.add_argument(
        "--agent-workers", type=int, default=1, help="agent worker processes, each --agent-concurrency and its own pool"
    )
    parser.add_argument(
        "--model-cap",
        type=int,
        default=0,
        help="AGENT_MODEL_CONCURRENCY and its per-tenant cap for the workers (0: the settings' defaults); "
        "every ticket here is one tenant's",
    )
    parser.add_argument("--filers", type=int, default=2, help="client processes filing the --rate stream")
    parser.add_argument("--pool-size", type=int, default=10, help="the agent worker's connection pool (0: none)")
    parser.add_argument("--gunicorn-workers", type=int, default=3)
    parser.add_argument(
        "--gunicorn-threads", type=int, default=1, help="threads per gunicorn worker (1: sync, as compose)"
    )
    parser.add_argument(
        "--rate", type=float, default=0, help="tickets a second, filed steadily (0: all at once, a burst)"
    )
    parser.add_argument(
        "--py-spy", default="", help="write a py-spy profile of the agent worker here (.txt: collapsed)"
    )
    parser.add_argument(
        "--py-spy-web", default="", help="write a py-spy profile of gunicorn's workers here (.txt: collapsed)"
    )
    parser.add_argument("--timeout", type=float, default=900, help="seconds for the whole run, at most")
    args = parser.parse_args()

    url = url_with_db(database_url(), db_name(database_url()) + "_latency")
    database_ensure(url)
    broker = os.environ.get("CELERY_BROKER_URL", "")
    if not broker.startswith("redis://"):
        raise SystemExit("set CELERY_BROKER_URL=redis://host:port/n: the benchmark runs real Celery workers")
    django_setup(url, AGENT_PROVIDER="offline")
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    call_command("seed_demo")
    run = f"LAT{uuid.uuid4().hex[:8].upper()}"
    orders = load_orders(run, args.tickets + 2)
    token = api_token()
    from django.db import connection

    connection.close()

    fake = FakeModel(args.turn_seconds, args.check_seconds, args.min_cacheable)
    env = {
        **os.environ,
        **BENCH_ENV,
        "DATABASE_URL": url,
        "CELERY_BROKER_URL": broker,
        "AGENT_PROVIDER": "anthropic",
        "ANTHROPIC_API_KEY": "benchmark-key",
        "ANTHROPIC_BASE_URL": fake.url,
        "ANTHROPIC_MODEL": MODEL,
        "DJANGO_SETTINGS_MODULE": settings_module(),
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("AGENT_SCRIPT", None)
    if args.model_cap > 0:
        env["AGENT_MODEL_CONCURRENCY"] = env["AGENT_MODEL_CONCURRENCY_PER_TENANT"] = str(args.model_cap)
    agent_env = dict(env)
    if args.pool_size > 0 and args.agent_pool != "prefork":
        agent_env["DATABASE_POOL_MAX_SIZE"] = str(args.pool_size)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    logs = Path(os.environ.get("TMPDIR", "/tmp")) / f"model-latency-{run}"
    logs.mkdir(parents=True, exist_ok=True)
    procs = Processes()
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(f"stopped by signal {signum}"))
    deadline = time.monotonic() + args.timeout
    in_flight: list[int] = []
    try:
        from celery import current_app

        current_app.control.purge()
        procs.start(
            "gunicorn",
            [
                str(PYTHON_BIN / "gunicorn"),
                wsgi_module(),
                "--bind",
                f"127.0.0.1:{port}",
                "--workers",
                str(args.gunicorn_workers),
                "--threads",
                str(args.gunicorn_threads),
                "--log-level",
                "warning",
            ],
            env,
            logs / "gunicorn.log",
        )
        for k in range(args.agent_workers):
            name = "agent" if k == 0 else f"agent{k + 1}"
            procs.start(
                name,
                celery(name, "agent", args.agent_pool, args.agent_concurrency, run),
                agent_env,
                logs / f"{name}.log",
            )
        procs.start("money", celery("money", "money", "prefork", 2, run), env, logs / "money.log")
        if not http_wait(f"{base}/api/health", min(deadline, time.monotonic() + 90)):
            raise SystemExit(f"the stack did not come up on {base} (logs in {logs})")

        # A warm-up ticket (workers, connections, the fake's cache of the prefix), then the floor.
        floors = []
        for order in orders[:2]:
            filed, errors = file_tickets(base, token, [order], 1, deadline)
            if errors or not filed:
                raise SystemExit(f"a single ticket failed: {errors} (logs in {logs})")
            ((pk, sent),) = filed
            state = watch([pk], min(deadline, time.monotonic() + 120), [])
            status, at = state[pk]
            if status != "approval_required":
                raise SystemExit(f"a single ticket ended {status}; logs in {logs}")
            floors.append(at - sent)
        floor = floors[-1]
        calls_before = fake.ask("reset")

        roots = {name: proc.pid for name, proc in procs.procs}
        cpu_before = {name: cpu_seconds(pid) for name, pid in roots.items()}
        load_before = os.getloadavg()
        spies = []
        for target, output, extra in (("agent", args.py_spy, []), ("gunicorn", args.py_spy_web, ["--subprocesses"])):
            if not output:
                continue
            import subprocess

            spies.append(
                subprocess.Popen(
                    # --gil: only the thread holding the GIL is sampled, so the shares are of the
                    # process's Python CPU, not of threads waiting on a socket or a lock.
                    [str(PYTHON_BIN / "py-spy"), "record", "--pid", str(roots[target]), "--format", "raw"]
                    + ["--nonblocking", "--gil", "-o", output, "--rate", "100", *extra],
                    stdout=subprocess.DEVNULL,
                    stderr=open(logs / f"py-spy-{target}.log", "w"),
                )
            )
        t0 = time.time()
        if args.rate > 0:
            filed, errors, late = file_in_processes(base, token, orders[2:], args.rate, args.filers, deadline)
            t0 = min((at for _, at in filed), default=t0)
        else:
            filed, errors = file_tickets(base, token, orders[2:], args.tickets, deadline)
            late = []
        filed_at = time.time()
        filed_at = max((at for _, at in filed), default=filed_at)
        state = watch([pk for pk, _ in filed], deadline, in_flight)
        cpu_used = {name: cpu_seconds(pid) - cpu_before[name] for name, pid in roots.items()}
        model_stats = fake.ask("stats")
        load_after = os.getloadavg()
        for spy in spies:
            spy.send_signal(signal.SIGINT)
            try:
                spy.wait(timeout=30)
            except Exception:
                spy.kill()
    finally:
        procs.stop()
        fake.stop()

    sent = dict(filed)
    latencies, stopped_at = [], []
    for pk, (status, at) in state.items():
        if status == "approval_required":
            latencies.append(at - sent[pk])
            stopped_at.append(at)
        else:
            errors.append(f"ticket {pk}: {status}")
    ok = len(latencies)
    span = (max(stopped_at) - t0) if stopped_at else float("nan")
    latencies.sort()
    usage = usage_of(list(sent))
    n = max(1, len(sent))
    read, write, plain, output = (usage[k] or 0 for k in ("cache_read", "cache_write", "input", "output"))
    share = read / (read + write + plain) if read + write + plain else 0.0
    usd = (usage["cost"] or 0) / n
    within = sum(1 for x in latencies if x <= 3 * floor)
    arrival = f"at {args.rate:g} a second by {args.filers} client processes" if args.rate > 0 else "at once"
    agents = [name for name in cpu_used if name.startswith("agent")]
    cpu_agent = sum(cpu_used[name] for name in agents)
    print(
        f"\nmodel latency: {args.tickets} tickets filed {arrival} over HTTP; fake Messages API at "
        f"{args.turn_seconds} s a turn (cache minimum {args.min_cacheable} tokens); gunicorn "
        f"{args.gunicorn_workers} workers x {args.gunicorn_threads} threads; {args.agent_workers} agent worker(s) -Q agent --pool={args.agent_pool} "
        f"--concurrency={args.agent_concurrency} (connection pool {args.pool_size or 'off'}); money worker "
        f"-Q money --pool=prefork --concurrency=2; model-call caps {args.model_cap or 'the defaults'}; PostgreSQL {db_name(url)}; broker {broker}"
    )
    print(
        f"one ticket alone: {floor:.1f} s (warm-up ticket {floors[0]:.1f} s); filing took {filed_at - t0:.1f} s "
        f"({len(filed) / max(0.001, filed_at - t0):.1f} a second)"
        + (f"; POSTs left late by p50 {statistics.median(late):.3f} s, at most {max(late):.3f} s" if late else "")
    )
    p50 = p95 = float("nan")
    if ok:
        p50 = statistics.median(latencies)
        p95 = latencies[min(len(latencies) - 1, int(round(0.95 * len(latencies))) - 1)]
        print(
            f"tickets/s {ok / span:.2f}; filing to approval_required p50 {p50:.1f} s, p95 {p95:.1f} s, "
            f"last {max(latencies):.1f} s ({max(latencies) / floor:.1f}x one ticket alone)"
        )
    print(
        f"runs in flight at most {max(in_flight, default=0)}; model calls in flight at most {model_stats['in_flight_max']}; "
        f"model calls {model_stats['answered'] - calls_before} ({(model_stats['answered'] - calls_before) / n:.1f} per ticket, "
        f"{(usage['calls'] or 0) / n:.1f} of them turns, the rest the reply check), 429s {model_stats['refused']}"
    )
    print(
        f"tokens per ticket: input {plain / n:.0f}, cache write {write / n:.0f}, cache read {read / n:.0f}, "
        f"output {output / n:.0f}; cache-read share {share:.2f}; USD per ticket {usd:.4f} at {MODEL} list prices"
    )
    product = cpu_used["gunicorn"] + cpu_agent + cpu_used["money"]
    print(
        "CPU seconds: "
        + ", ".join(
            f"{name} {seconds:.1f} s ({1000 * seconds / n:.1f} ms a ticket)" for name, seconds in cpu_used.items()
        )
        + f"; product {1000 * product / n:.1f} ms a ticket (the fake model and this client not counted)"
    )
    print(
        f"within 3x one ticket alone ({3 * floor:.1f} s): {within} of {len(sent)} ({within / args.tickets:.1%}); "
        f"errors {len(errors)}; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after"
    )
    for line in errors[:20]:
        print(f"  error: {line}")
    print(f"(server logs: {logs})", flush=True)
    print(
        f"model_latency tickets={args.tickets} ok={ok} tickets_per_s={ok / span if ok else 0:.2f} "
        f"in_flight_max={max(in_flight, default=0)} floor_s={floor:.1f} cache_read_share={share:.2f} "
        f"usd_per_ticket={usd:.4f} rate={args.rate:g} within_3x={within / args.tickets:.3f} errors={len(errors)} "
        f"p50_s={p50:.1f} p95_s={p95:.1f} agent_workers={args.agent_workers} model_cap={args.model_cap} "
        f"cpu_ms_web={1000 * cpu_used['gunicorn'] / n:.1f} cpu_ms_worker={1000 * cpu_agent / n:.1f} "
        f"cpu_ms_money={1000 * cpu_used['money'] / n:.1f} cpu_ms_product={1000 * product / n:.1f} "
        f"load1={load_after[0]:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
