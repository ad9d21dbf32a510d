"""The CPU floor of a ticket: what its building blocks cost on this machine, each at its cheapest.

A ticket is made of about 42 SQL statements (BEGIN and COMMIT counted), five model calls
through the `anthropic` SDK, one Celery publish and one task taken by the worker, and one HTTP
request in the web. This script times each block alone, in this process, with
`time.thread_time()` (CPU, not wall clock), as the simplest form the product could use:

- the driver alone: `SELECT 1` through Django's cursor;
- the ORM at its cheapest: a read by primary key, an UPDATE by primary key, an INSERT;
- one model call through the product's Anthropic provider (the SDK over HTTP to the fake
  Messages API in a process of its own, answering at once), with the product's system prompt,
  tools and a four-turn transcript;
- one Celery publish of the agent task to the broker.

It then prints the floor of a ticket: its 13 reads, 15 writes and 14 BEGIN/COMMIT as if each
were the cheapest of its kind, plus five model calls and a publish. Whatever the product does beyond that floor is
the cost of what its statements say (joins, subqueries, locks, the decision's facts); below the
floor no change to the product's own code can go, only a faster runtime (a compiled query
layer, another driver or interpreter) or fewer statements and calls. The figures move with the
machine's load: read them against each other, in one run.

    DATABASE_URL=postgres://... CELERY_BROKER_URL=redis://... python benchmarks/cpu_floor.py [--rounds 2000]

Last line: `cpu_floor orm_read_ms=... orm_update_ms=... orm_insert_ms=... driver_ms=... model_call_ms=...
publish_ms=... ticket_floor_ms=...`
"""

import argparse
import json
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import database_ensure, database_url, django_setup, url_with_db  # noqa: E402

# A ticket's 42 statements (agent_overhead.py; docs/performance.md, "Where a ticket's statements
# go"): 13 reads, 15 writes, 7 BEGIN and 7 COMMIT; and its five model calls (four turns and the
# reply check).
READS_PER_TICKET = 13
WRITES_PER_TICKET = 15
TRANSACTION_STATEMENTS_PER_TICKET = 14
MODEL_CALLS_PER_TICKET = 5


def per_call_ms(operation, rounds: int, batches: int = 7) -> float:
    """Median over `batches` of the CPU milliseconds one call takes, each batch `rounds // batches` calls."""
    size = max(1, rounds // batches)
    operation()  # warm: prepared statements, connections, caches
    samples = []
    for _ in range(batches):
        started = time.thread_time()
        for _ in range(size):
            operation()
        samples.append((time.thread_time() - started) * 1000 / size)
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2000, help="calls of each database block (model calls: a tenth)")
    args = parser.parse_args()

    url = url_with_db(database_url(), "cpu_floor")
    database_ensure(url)
    django_setup(url, DATABASE_CONN_MAX_AGE="600")

    from django.contrib.auth.models import Group, User
    from django.db import connection
    from django.db.models import F

    user, _ = User.objects.get_or_create(username="cpu-floor")
    Group.objects.filter(name__startswith="cpu-floor-").delete()

    def driver():
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()

    def orm_read():
        User.objects.get(pk=user.pk)

    def orm_update():
        User.objects.filter(pk=user.pk).update(last_login=F("last_login"))

    def orm_insert():
        Group.objects.create(name=f"cpu-floor-{uuid.uuid4().hex}")

    figures = {
        "driver_ms": per_call_ms(driver, args.rounds),
        "orm_read_ms": per_call_ms(orm_read, args.rounds),
        "orm_update_ms": per_call_ms(orm_update, args.rounds),
        "orm_insert_ms": per_call_ms(orm_insert, args.rounds),
    }
    Group.objects.filter(name__startswith="cpu-floor-").delete()

    figures["model_call_ms"] = model_call_ms(max(20, args.rounds // 10))
    figures["publish_ms"] = publish_ms(max(50, args.rounds // 10))

    cheapest_write = min(figures["orm_update_ms"], figures["orm_insert_ms"])
    figures["ticket_floor_ms"] = (
        READS_PER_TICKET * figures["orm_read_ms"]
        + WRITES_PER_TICKET * cheapest_write
        + TRANSACTION_STATEMENTS_PER_TICKET * figures["driver_ms"]
        + MODEL_CALLS_PER_TICKET * figures["model_call_ms"]
        + figures["publish_ms"]
    )
    print("CPU a call, median (this process, time.thread_time):")
    print(f"  SELECT 1 through Django's cursor    {figures['driver_ms']:.3f} ms")
    print(f"  ORM read by primary key             {figures['orm_read_ms']:.3f} ms")
    print(f"  ORM UPDATE by primary key           {figures['orm_update_ms']:.3f} ms")
    print(f"  ORM INSERT of one row               {figures['orm_insert_ms']:.3f} ms")
    print(f"  one model call through the SDK      {figures['model_call_ms']:.3f} ms")
    print(f"  one Celery publish                  {figures['publish_ms']:.3f} ms")
    print(
        f"a ticket's floor: {READS_PER_TICKET} reads, {WRITES_PER_TICKET} writes (at the cheaper write's "
        f"cost) and {TRANSACTION_STATEMENTS_PER_TICKET} BEGIN/COMMIT, {MODEL_CALLS_PER_TICKET} model calls "
        f"and a publish: {figures['ticket_floor_ms']:.1f} ms "
        "(not counted: the web's request handling, the task's taking, the statements' own weight)"
    )
    print("cpu_floor " + " ".join(f"{name}={value:.3f}" for name, value in figures.items()))
    return 0


def model_call_ms(rounds: int) -> float:
    """One call of the product's provider, as a turn of the loop makes it, to the fake at once.
    The fake answers every call with the same tool call; the transcript is as long as a
    ticket's last turn (the first message, three tool calls and their results)."""
    from refundagent.agent.prompts import SYSTEM_PROMPT
    from refundagent.agent.providers.anthropic import AnthropicProvider
    from refundagent.agent.tools import TOOL_DEFS
    from refundagent.tests.fake_anthropic import FakeAnthropic, Scripted

    def answer(body: dict) -> Scripted:
        return Scripted(
            body={
                "id": f"msg_{uuid.uuid4().hex[:12]}",
                "type": "message",
                "role": "assistant",
                "model": body.get("model"),
                "content": [
                    {
                        "type": "tool_use",
                        "id": f"toolu_{uuid.uuid4().hex[:12]}",
                        "name": "orders_lookup_order",
                        "input": {"order_id": "ORD-1"},
                    }
                ],
                "stop_reason": "tool_use",
                "stop_sequence": None,
                "usage": {
                    "input_tokens": 212,
                    "output_tokens": 60,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 1875,
                },
            }
        )

    fake = FakeAnthropic(responder=answer).start()
    try:
        provider = AnthropicProvider(api_key="sk-cpu-floor", base_url=fake.url, max_retries=0)
        tools = [definition.spec() for definition in TOOL_DEFS.values()]
        text = "Investigate this refund ticket. Order ORD-1 arrived broken; I want my money back. " * 6
        messages = [{"role": "user", "content": [{"type": "text", "text": text}]}]
        for k in range(3):
            turn = provider.complete(system=SYSTEM_PROMPT, tools=tools, messages=messages, max_tokens=1024)
            messages.append({"role": "assistant", "content": turn.content})
            result = json.dumps({"order": "ORD-1", "total": "42.00", "lines": [{"sku": f"SKU-{k}", "qty": 1}] * 4})
            messages.append(
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": turn.tool_calls[0].id, "content": result}],
                }
            )

        def call():
            provider.complete(system=SYSTEM_PROMPT, tools=tools, messages=messages, max_tokens=1024)

        # The fake answers in this process, but on its own server thread: not this thread's CPU.
        return per_call_ms(call, rounds)
    finally:
        fake.stop()


def publish_ms(rounds: int) -> float:
    """The web's hand-over of a run to the agent's queue (a task nobody takes; purged after)."""
    from celery import current_app

    queue = f"cpu-floor-{uuid.uuid4().hex[:8]}"

    def publish():
        current_app.send_task("refundagent.tasks.agent_run_ticket_task", args=[0], queue=queue)

    try:
        return per_call_ms(publish, rounds)
    finally:
        with current_app.connection_for_write() as conn:
            conn.default_channel.queue_delete(queue)


if __name__ == "__main__":
    raise SystemExit(main())
