"""refundagent against LangGraph + PostgresSaver and tightloop, side by side, in one process.

    pip install -r benchmarks/requirements.txt      # on top of the project's requirements
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/refundagent python benchmarks/side_by_side.py
    DATABASE_URL=... python benchmarks/side_by_side.py --size large    # 100k orders, 10k tickets
    DATABASE_URL=... python benchmarks/side_by_side.py --floor         # and where refundagent's time goes

The same scripted "model" makes exactly the same four tool calls in every runtime: look up the
order, the payment summary and the policy, then create the draft. Every runtime persists every
step and stops where a person must approve:

- refundagent: a ticket filed with the service `ticket_create` (the agent run is the Celery task,
  run eagerly in-process) on the scripted provider (AGENT_PROVIDER=scripted), through the real
  loop (gate, redaction, trace, draft, approval request) up to status approval_required;
- LangGraph 1.2: a graph model -> tools -> model ... -> approval, checkpointed by PostgresSaver in
  the same PostgreSQL; its tools read the same order, payment and policy rows with psycopg; the
  draft ends in `interrupt()` (LangGraph's human-in-the-loop stop). durability="sync" is the
  reference (a step is durable before the next one starts, as in refundagent); "async" (the
  LangGraph default, where a crash can lose the last step) is shown for information;
- tightloop 0.1.0: a Loop with a state file and a JSONL trace; the same psycopg reads; the draft
  tool is gated by RequireApproval with the headless runner, so the loop saves its state and
  stops AWAITING_APPROVAL.

With --floor, refundagent's time is split into its wait on the server and the rest (its Python),
and a fifth entry takes its turn: the round trips the durability contract needs at the least,
alone on a psycopg connection (DurabilityFloor). Both are put next to LangGraph's whole ticket.

The runtimes take turns ticket by ticket (the order rotates every round) after a warm-up, so
noise on this shared machine hits them alike. Databases: --size small uses DATABASE_URL's
database (migrated, demo data); --size large uses "<name>_large", created, migrated and filled
here when missing (100k orders with items and payments, 10k tickets with trace events), kept
for the next run. Last line:
    ratio_vs_langgraph_postgres=<x.xx> queries_per_ticket=<n> ms_per_ticket=<x.x>
"""

import argparse
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import database_ensure, database_url, db_name, django_setup, libpq_url, p90, url_with_db  # noqa: E402

ORDER, CUSTOMER, TENANT = "ORD-5001", "CUST-1001", "acme"
MESSAGE = "My headphones arrived broken, please refund $120."
AMOUNT = "120.00"


def script(policy_version: str) -> list[dict]:
    """The scripted model's four turns, the same for every runtime."""
    return [
        {"tool": "orders_lookup_order", "input": {"order_id": ORDER}},
        {"tool": "payments_get_summary", "input": {"order_id": ORDER}},
        {"tool": "refund_policy_retrieve", "input": {}},
        {
            "tool": "refunds_create_draft",
            "input": {
                "recommendation": "refund",
                "amount": AMOUNT,
                "policy_version": policy_version,
                "rationale": f"Order {ORDER} is delivered, 12 days old, within the 30-day window; {AMOUNT} USD is "
                "refundable. Finance approves before anything is issued.",
                "customer_reply": f"Hello, we passed a refund request on order {ORDER} to our finance team for review.",
                "destination": "original",
            },
        },
    ]


# --- the peers' tools: the same rows, read with psycopg --------------------------------------

ORDER_SQL = """
SELECT o.id, o.external_id, o.status, o.placed_at, o.currency, o.total, o.note, c.external_id AS customer,
       COALESCE((SELECT SUM(e.amount) FROM ledger_refundentry e WHERE e.order_id = o.id), 0) AS refunded
FROM ledger_order o JOIN ledger_tenant t ON t.id = o.tenant_id JOIN ledger_customer c ON c.id = o.customer_id
WHERE t.slug = %s AND o.external_id = %s"""
ITEMS_SQL = """
SELECT i.item_id, i.name, i.price, i.quantity,
       COALESCE((SELECT SUM(r.quantity) FROM ledger_refundentryitem r WHERE r.order_item_id = i.id), 0) AS refunded
FROM ledger_orderitem i WHERE i.order_id = %s ORDER BY i.line_no"""
PAYMENTS_SQL = """
SELECT p.method, p.card_brand, p.card_last4, p.amount, p.currency
FROM ledger_payment p JOIN ledger_order o ON o.id = p.order_id JOIN ledger_tenant t ON t.id = o.tenant_id
WHERE t.slug = %s AND o.external_id = %s ORDER BY p.id"""
POLICY_SQL = """
SELECT p.version, p.window_days, p.full_refund_statuses, p.item_refund_statuses, p.full_refund_destinations,
       p.item_refund_destinations, p.two_approver_threshold, p.text
FROM approvals_refundpolicy p JOIN ledger_tenant t ON t.id = p.tenant_id
WHERE t.slug = %s AND p.status = 'published' ORDER BY p.published_at DESC LIMIT 1"""


def _money(value) -> str:
    return str(Decimal(value).quantize(Decimal("0.01")))


class PeerTools:
    """The three reads of the peers, on one psycopg connection (a worker's)."""

    def __init__(self, url: str):
        import psycopg
        from psycopg.rows import dict_row

        self.conn = psycopg.connect(libpq_url(url), autocommit=True, row_factory=dict_row)

    def lookup_order(self, order_id: str) -> dict:
        order = self.conn.execute(ORDER_SQL, (TENANT, order_id)).fetchone()
        if order is None:
            return {"error": "not_found"}
        items = self.conn.execute(ITEMS_SQL, (order["id"],)).fetchall()
        return {
            "order": order["external_id"],
            "customer": order["customer"],
            "status": order["status"],
            "placed_at": order["placed_at"].isoformat(),
            "currency": order["currency"],
            "total": _money(order["total"]),
            "refunded_total": _money(order["refunded"]),
            "refundable": _money(order["total"] - order["refunded"]),
            "items": [
                {
                    "item_id": i["item_id"],
                    "name": i["name"],
                    "price": _money(i["price"]),
                    "quantity": i["quantity"],
                    "refunded_quantity": int(i["refunded"]),
                }
                for i in items
            ],
        }

    def payment_summary(self, order_id: str) -> dict:
        rows = self.conn.execute(PAYMENTS_SQL, (TENANT, order_id)).fetchall()
        return {
            "order": order_id,
            "payments": [
                {
                    "method": p["method"],
                    "brand": p["card_brand"],
                    "last4": p["card_last4"],
                    "amount": _money(p["amount"]),
                    "currency": p["currency"],
                }
                for p in rows
            ],
        }

    def policy_retrieve(self) -> dict:
        p = self.conn.execute(POLICY_SQL, (TENANT,)).fetchone()
        return {k: (_money(v) if k == "two_approver_threshold" and v is not None else v) for k, v in p.items()}

    def call(self, name: str, args: dict) -> dict:
        if name == "orders_lookup_order":
            return self.lookup_order(args["order_id"])
        if name == "payments_get_summary":
            return self.payment_summary(args["order_id"])
        if name == "refund_policy_retrieve":
            return self.policy_retrieve()
        raise KeyError(name)


# --- refundagent ------------------------------------------------------------------------------


class RefundAgent:
    name = "refundagent (scripted provider)"

    def __init__(self):
        from django.apps import apps
        from django.contrib.auth import get_user_model

        self.Ticket = apps.get_model("refundagent", "Ticket")
        self.support = get_user_model().objects.get(username="acme-support")
        self.queries: list[int] = []
        self.waits: list[float] = []  # ms per ticket waiting on the server, with --floor
        # Tickets an interrupted run left open on the order would trip the same risk rules.
        leftover = self.Ticket.objects.filter(order__external_id=ORDER, order__tenant__slug=TENANT)
        for ticket_id in leftover.exclude(status__in=["refunded", "denied", "closed"]).values_list("pk", flat=True):
            self.settle(ticket_id)
        try:
            from celery import current_app

            current_app.conf.task_always_eager = True  # the agent run happens inside ticket_create
        except ImportError:
            pass

    def one(self) -> float:
        from django.db import connection

        from refundagent.services import ticket_create

        count = [0]

        def counter(execute, sql, params, many, context):
            count[0] += 1
            return execute(sql, params, many, context)

        with connection.execute_wrapper(counter), ServerWait() as waited:
            started = time.perf_counter()
            ticket = ticket_create(
                user=self.support, order=ORDER, customer=CUSTOMER, message=MESSAGE, requested_amount=AMOUNT
            )
            elapsed = time.perf_counter() - started
        # The benchmark's own check, neither timed nor counted.
        status = self.Ticket.objects.values_list("status", flat=True).get(pk=ticket.pk)
        if status == "queued":
            # Not run eagerly (Celery configured otherwise): run the loop here, timed and counted too.
            from refundagent.agent.loop import agent_run_ticket

            with connection.execute_wrapper(counter):
                started = time.perf_counter()
                agent_run_ticket(ticket_id=ticket.pk)
                elapsed += time.perf_counter() - started
            status = self.Ticket.objects.values_list("status", flat=True).get(pk=ticket.pk)
        if status != "approval_required":
            detail = self.Ticket.objects.values_list("stop_detail", flat=True).get(pk=ticket.pk)
            raise SystemExit(f"refundagent ticket {ticket.pk} ended {status}, not approval_required: {detail}")
        self.settle(ticket.pk)
        self.queries.append(count[0])
        self.waits.append(waited.ms)
        return elapsed * 1000

    def settle(self, ticket_id: int) -> None:
        """Escalate (withdrawing its approval request) and close the ticket, neither timed nor
        counted, so that every ticket meets the same ledger: the demo policy's risk rules (open
        tickets per order, the customer's refunds in flight) would otherwise escalate the next one."""
        from refundagent.services import ticket_close, ticket_escalate

        if self.Ticket.objects.get(pk=ticket_id).status == "approval_required":
            ticket_escalate(ticket=self.Ticket.objects.get(pk=ticket_id), user=self.support)
        ticket_close(ticket=self.Ticket.objects.get(pk=ticket_id), user=self.support)


# --- LangGraph + PostgresSaver ----------------------------------------------------------------


class LangGraphPostgres:
    def __init__(self, url: str, turns: list[dict], durability: str):
        import operator
        from typing import Annotated, TypedDict

        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver
        from langgraph.graph import END, START, StateGraph
        from langgraph.types import interrupt
        from psycopg.rows import dict_row

        self.name = f"langgraph + PostgresSaver (durability={durability})"
        self.durability = durability
        self.conn = psycopg.connect(libpq_url(url), autocommit=True, prepare_threshold=0, row_factory=dict_row)
        self.saver = PostgresSaver(self.conn)
        self.saver.setup()
        tools = PeerTools(url)

        class State(TypedDict):
            ticket: dict
            messages: Annotated[list, operator.add]
            draft: dict | None

        def model(state: State) -> dict:
            # The scripted model: the turn it plays is the number of assistant messages so far.
            index = sum(1 for m in state["messages"] if m["role"] == "assistant")
            turn = turns[index]
            call = {"id": f"call_{index}", "name": turn["tool"], "args": turn["input"]}
            return {"messages": [{"role": "assistant", "tool_calls": [call]}]}

        def route(state: State) -> str:
            call = state["messages"][-1]["tool_calls"][0]
            return "approval" if call["name"] == "refunds_create_draft" else "tools"

        def run_tools(state: State) -> dict:
            call = state["messages"][-1]["tool_calls"][0]
            result = tools.call(call["name"], call["args"])
            return {
                "messages": [{"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result, default=str)}]
            }

        def approval(state: State) -> dict:
            draft = state["messages"][-1]["tool_calls"][0]["args"]
            answer = interrupt({"draft": draft, "reason": "a person approves the refund"})
            return {"draft": {**draft, "approved": answer}}

        graph = StateGraph(State)
        graph.add_node("model", model)
        graph.add_node("tools", run_tools)
        graph.add_node("approval", approval)
        graph.add_edge(START, "model")
        graph.add_conditional_edges("model", route, ["tools", "approval"])
        graph.add_edge("tools", "model")
        graph.add_edge("approval", END)
        self.graph = graph.compile(checkpointer=self.saver)

    def one(self) -> float:
        config = {"configurable": {"thread_id": f"ticket-{uuid.uuid4().hex}"}}
        started = time.perf_counter()
        out = self.graph.invoke(
            {
                "ticket": {"order": ORDER, "customer": CUSTOMER, "message": MESSAGE, "requested_amount": AMOUNT},
                "messages": [{"role": "user", "content": MESSAGE}],
                "draft": None,
            },
            config,
            durability=self.durability,
        )
        ended = time.perf_counter()
        if "__interrupt__" not in out:
            raise SystemExit(f"langgraph did not stop for approval: {list(out)}")
        return (ended - started) * 1000


# --- tightloop ---------------------------------------------------------------------------------


class TightLoop:
    name = "tightloop 0.1.0 (state file + JSONL trace)"

    def __init__(self, url: str, turns: list[dict], workdir: Path):
        from loop import CallableLLM, HeadlessApprovalRunner, LLMResponse, NoProgress, RequireApproval, ToolCallReq
        from loop import tool as loop_tool

        self.workdir = workdir
        db = PeerTools(url)

        # tightloop derives tool schemas from type hints; these mirror refundagent's tools.
        @loop_tool(name="orders_lookup_order")
        def lookup(order_id: str) -> str:
            """Look up the ticket's order."""
            return json.dumps(db.lookup_order(order_id), default=str)

        @loop_tool(name="payments_get_summary")
        def payments(order_id: str) -> str:
            """The order's payment summary."""
            return json.dumps(db.payment_summary(order_id), default=str)

        @loop_tool(name="refund_policy_retrieve")
        def policy() -> str:
            """The tenant's current refund policy."""
            return json.dumps(db.policy_retrieve(), default=str)

        @loop_tool(name="refunds_create_draft")
        def create_draft(
            recommendation: str, amount: str, policy_version: str, rationale: str, customer_reply: str, destination: str
        ) -> str:
            """Record the recommendation (gated: a person approves)."""
            return "draft recorded"

        self.tools = [lookup, payments, policy, create_draft]
        self.runner_cls = HeadlessApprovalRunner
        self.policies = lambda: [NoProgress(3), RequireApproval({"refunds_create_draft"}, reason="a person approves")]
        holder: dict = {}

        def model(messages, tool_schemas) -> LLMResponse:
            # tightloop hands the model a rebuilt prompt, not a transcript: the turn the script plays
            # is the number of iterations in the loop's state (= assistant turns so far).
            index = len(holder["loop"].state.iterations)
            turn = turns[index]
            return LLMResponse(
                tool_calls=[ToolCallReq(id=f"call_{index}", name=turn["tool"], args=turn["input"])],
                input_tokens=100,
                output_tokens=20,
                model_id="scripted",
            )

        self.holder, self.llm = holder, CallableLLM(model, model_id="scripted")
        from loop import Loop

        self.Loop = Loop

    def one(self) -> float:
        from loop import LoopStatus

        key = uuid.uuid4().hex
        started = time.perf_counter()
        run = self.Loop(
            goal=f"Decide the refund ticket on order {ORDER}: {MESSAGE}",
            tools=self.tools,
            llm=self.llm,
            policies=self.policies(),
            approval_runner=self.runner_cls(),
            state_path=str(self.workdir / f"{key}.json"),
            trace_path=str(self.workdir / f"{key}.jsonl"),
            quiet=True,
        )
        self.holder["loop"] = run
        result = run.run()
        ended = time.perf_counter()
        if result.status != LoopStatus.AWAITING_APPROVAL:
            raise SystemExit(f"tightloop stopped {result.status}: {result.reason}")
        return (ended - started) * 1000


# --- the floor of the durability contract (--floor) -------------------------------------------


class ServerWait:
    """While active (with --floor), the time this thread spends in psycopg's `Connection.wait`:
    waiting on the server, round trips and commits included. Off, it costs nothing."""

    enabled = False
    _active: "ServerWait | None" = None

    def __init__(self):
        self.ms = 0.0

    def __enter__(self):
        ServerWait._active = self if self.enabled else None
        return self

    def __exit__(self, *exc):
        ServerWait._active = None

    @classmethod
    def install(cls):
        import psycopg

        wait = psycopg.Connection.wait

        def timed_wait(conn, gen, *args, **kwargs):
            active = cls._active
            if active is None:
                return wait(conn, gen, *args, **kwargs)
            started = time.perf_counter()
            try:
                return wait(conn, gen, *args, **kwargs)
            finally:
                active.ms += (time.perf_counter() - started) * 1000

        psycopg.Connection.wait = timed_wait
        cls.enabled = True


class DurabilityFloor:
    """The round trips refundagent's durability contract needs at the very least, with no runtime
    around them: 7 commits (the filing, the claim, one persist per model turn for the four turns,
    the decision) and 2 reads (the run's ticket with every fact its tools give, the decision's
    facts), on one psycopg connection. Each commit writes a run's transcript as big as
    refundagent's (its newest run's messages) into a table of its own; nothing of the product's
    is touched. What no design that keeps the contract can go below, in database time alone."""

    name = "durability floor: 7 commits + 2 reads, no runtime"

    def __init__(self, url: str):
        import psycopg

        self.conn = psycopg.connect(libpq_url(url), autocommit=True)
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS bench_floor_run (id bigserial PRIMARY KEY, messages jsonb NOT NULL, "
            "lease_expires_at timestamptz NOT NULL DEFAULT now())"
        )
        row = self.conn.execute(
            "SELECT messages::text, ticket_id FROM refundagent_agentrun ORDER BY id DESC LIMIT 1"
        ).fetchone()
        self.messages, self.ticket_id = row if row else ("[]", 0)
        self.run_id = self.conn.execute(
            "INSERT INTO bench_floor_run (messages) VALUES (%s::jsonb) RETURNING id", (self.messages,)
        ).fetchone()[0]

    def one(self) -> float:
        started = time.perf_counter()
        for _ in range(7):
            self.conn.execute(
                "UPDATE bench_floor_run SET messages = %s::jsonb, lease_expires_at = now() WHERE id = %s",
                (self.messages, self.run_id),
            )
        for _ in range(2):
            self.conn.execute("SELECT * FROM refundagent_ticket WHERE id = %s", (self.ticket_id,)).fetchall()
        return (time.perf_counter() - started) * 1000


# --- the large database ----------------------------------------------------------------------


def grow_large(orders: int, tickets: int, events_per_ticket: int) -> None:
    """Fill up to `orders` orders (one item and one payment each) and `tickets` other tickets (with
    trace events). Idempotent: what is there already counts."""
    from datetime import timedelta

    from django.apps import apps
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction
    from django.utils import timezone

    Tenant, Customer = apps.get_model("ledger", "Tenant"), apps.get_model("ledger", "Customer")
    Order, OrderItem = apps.get_model("ledger", "Order"), apps.get_model("ledger", "OrderItem")
    Payment, Ticket = apps.get_model("ledger", "Payment"), apps.get_model("refundagent", "Ticket")
    acme = Tenant.objects.get(slug=TENANT)
    other, _ = Tenant.objects.get_or_create(slug="bench-other", defaults={"name": "Benchmark other"})
    user = get_user_model().objects.get(username="acme-support")
    now = timezone.now()
    have = Order.objects.count()
    started = time.perf_counter()
    batch = 5000
    k = have
    while k < orders:
        n = min(batch, orders - k)
        with transaction.atomic():
            made = []
            for tenant in (acme, other):
                customer, _ = Customer.objects.get_or_create(
                    tenant=tenant, external_id="BENCH-CUST", defaults={"name": "Bench", "email": "bench@example.com"}
                )
                made += Order.objects.bulk_create(
                    [
                        Order(
                            tenant=tenant,
                            customer=customer,
                            external_id=f"BENCH-{k + i}",
                            total=Decimal("10.00"),
                            currency="USD",
                            placed_at=now - timedelta(days=(k + i) % 60),
                            status="delivered",
                        )
                        for i in range(0 if tenant == acme else n // 2, n // 2 if tenant == acme else n)
                    ]
                )
            OrderItem.objects.bulk_create(
                [OrderItem(order=o, line_no=1, item_id="B", name="Bench item", price=Decimal("10.00")) for o in made]
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
                    for o in made
                ]
            )
        k += n
    if have < orders:
        print(f"  filled orders {have} -> {Order.objects.count()} in {time.perf_counter() - started:.0f} s", flush=True)
    have_tickets = Ticket.objects.count()
    if have_tickets < tickets:
        pool = list(
            Order.objects.filter(tenant=acme, external_id__startswith="BENCH-").select_related("customer")[
                : tickets - have_tickets
            ]
        )
        with transaction.atomic():
            made = Ticket.objects.bulk_create(
                [
                    Ticket(
                        tenant=acme,
                        order=o,
                        customer=o.customer,
                        message="bench",
                        currency="USD",
                        created_by=user,
                        status="escalated",
                    )
                    for o in pool
                ],
                batch_size=2000,
            )
            try:
                TraceEvent = apps.get_model("refundagent", "TraceEvent")
                TraceEvent.objects.bulk_create(
                    [
                        TraceEvent(ticket=t, trace_id=t.trace_id, seq=s + 1, span="tool", status="ok")
                        for t in made
                        for s in range(events_per_ticket)
                    ],
                    batch_size=5000,
                )
            except (LookupError, TypeError) as exc:  # the trace model was restructured: tickets alone
                print(f"  (no trace events added: {exc})")
        print(f"  filled tickets {have_tickets} -> {Ticket.objects.count()}", flush=True)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


# --- main ---------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tickets", type=int, default=60, help="measured tickets per runtime (default 60)")
    parser.add_argument("--warmup", type=int, default=5, help="warm-up tickets per runtime, not measured")
    parser.add_argument("--size", choices=["small", "large"], default="small")
    parser.add_argument("--orders", type=int, default=100_000, help="orders in the large database")
    parser.add_argument("--other-tickets", type=int, default=10_000, help="tickets in the large database")
    parser.add_argument("--no-async", action="store_true", help="skip the informational LangGraph async run")
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also split refundagent's time into database wait and the rest, and time the durability "
        "contract's round trips alone (DurabilityFloor), taking turns with the runtimes",
    )
    args = parser.parse_args()

    base = database_url()
    url = base if args.size == "small" else url_with_db(base, db_name(base) + "_large")
    if args.size == "large" and database_ensure(url):
        print(f"created database {db_name(url)}")
    # The scripted provider is the product's own (AGENT_PROVIDER=scripted plays AGENT_SCRIPT). No
    # broker: the agent task runs eagerly inside ticket_create, in this process. A connection
    # pool, as docker-compose.yml's agent worker has: a run gives its connection back while the
    # model thinks (agent.loop), which without a pool would mean a new connection per turn.
    os.environ.pop("CELERY_BROKER_URL", None)
    django_setup(url, AGENT_PROVIDER="scripted", AGENT_SCRIPT="[]", DATABASE_POOL_MAX_SIZE="10")

    from django.apps import apps
    from django.core.management import call_command

    call_command("seed_demo")
    if args.size == "large":
        grow_large(args.orders, args.other_tickets, 10)
    Policy = apps.get_model("approvals", "RefundPolicy")
    version = Policy.objects.filter(tenant__slug=TENANT, status="published").order_by("-published_at").first().version
    turns = script(version)
    os.environ["AGENT_SCRIPT"] = json.dumps(turns)  # read by the provider at every run

    workdir = Path(tempfile.mkdtemp(prefix="tightloop-bench-"))
    try:
        runtimes = [RefundAgent(), LangGraphPostgres(url, turns, "sync")]
        if not args.no_async:
            runtimes.append(LangGraphPostgres(url, turns, "async"))
        runtimes.append(TightLoop(url, turns, workdir))
        if args.floor:
            ServerWait.install()
            runtimes.append(DurabilityFloor(url))
        times: dict[str, list[float]] = {r.name: [] for r in runtimes}
        for _ in range(args.warmup):
            for r in runtimes:
                r.one()
        runtimes[0].queries.clear()
        runtimes[0].waits.clear()
        for k in range(args.tickets):
            gc.collect()
            shift = k % len(runtimes)
            for r in runtimes[shift:] + runtimes[:shift]:
                times[r.name].append(r.one())
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    Order, Ticket = apps.get_model("ledger", "Order"), apps.get_model("refundagent", "Ticket")
    refund, reference = runtimes[0], runtimes[1]
    queries = refund.queries
    print(
        f"\nside by side, {args.size} database {db_name(url)} ({Order.objects.count()} orders, "
        f"{Ticket.objects.count()} tickets), PostgreSQL, scripted 4-tool loop to the approval stop, "
        f"{args.tickets} tickets per runtime after {args.warmup} warm-up, runtimes alternating"
    )
    print(f"{'runtime':48} {'median ms':>9} {'p90 ms':>8} {'x refundagent':>13}")
    ra_median = statistics.median(times[refund.name])
    for r in runtimes:
        values = times[r.name]
        median = statistics.median(values)
        print(f"{r.name:48} {median:>9.1f} {p90(values):>8.1f} {median / ra_median:>13.2f}")
    q_median = int(statistics.median(queries))
    print(f"refundagent SQL queries per ticket: median {q_median}, min {min(queries)}, max {max(queries)}")
    reference_median = statistics.median(times[reference.name])
    if args.floor:
        waits = refund.waits
        rest = [t - w for t, w in zip(times[refund.name], waits, strict=True)]
        floor = statistics.median(times[DurabilityFloor.name])
        print(
            f"refundagent: waiting on the server {statistics.median(waits):.1f} ms, the rest (its Python) "
            f"{statistics.median(rest):.1f} ms = {statistics.median(rest) / reference_median:.2f} x {reference.name}"
        )
        print(f"durability floor: {floor:.1f} ms = {floor / reference_median:.2f} x {reference.name}")
    ratio = ra_median / reference_median
    print(f"ratio refundagent / {reference.name} = {ratio:.2f}")
    print(f"ratio_vs_langgraph_postgres={ratio:.2f} queries_per_ticket={q_median} ms_per_ticket={ra_median:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
