"""CPU per ticket of the agent loop's own persistence: this checkout against an older revision.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/refundagent \
        .venv/bin/python benchmarks/agent_loop_cpu.py --against <rev> [--tickets 40]

Works in a scratch database (created and dropped here). Files queued tickets (their agent run is
not enqueued) and runs the agent on each through `agent_run_ticket` with the offline provider,
the old code (refundagent/agent/loop.py, tracing.py, ticket_state.py as of `--against`, loaded
from git) and the new taking turns, ticket by ticket. Prints, for each, the median process CPU
per ticket and the SQL statements per ticket (BEGIN/COMMIT included), then the median CPU of
one `trace_events_write` of 1 and of 3 events under the run's lock, old against new.
"""

import argparse
import importlib
import os
import statistics
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "refundagent.config.settings")

import django  # noqa: E402

django.setup()

from _bench import demo_ticket_file, demo_ticket_settle, modules_at, scratch_database  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

# The modules whose old and new versions are compared, and what each takes from the others.
MODULES = ("refundagent.ticket_state", "refundagent.tracing", "refundagent.agent.loop")


def old_modules(rev: str) -> dict[str, types.ModuleType]:
    """The MODULES as of `rev`, loaded beside the current ones, wired to each other."""
    return modules_at(rev, tuple(name.replace(".", "/") + ".py" for name in MODULES))


def ticket_queued(support):
    """The demo ticket, filed with its run not handed to Celery: the benchmark runs it itself."""
    from refundagent import services

    enqueue = services.ticket_run_enqueue
    services.ticket_run_enqueue = lambda pk: None
    try:
        return demo_ticket_file(support)
    finally:
        services.ticket_run_enqueue = enqueue


def runs(n: int, support, loops: dict) -> dict:
    from refundagent.agent.providers.offline import OfflineProvider

    cpu = {k: [] for k in loops}
    statements = {k: [] for k in loops}
    for i in range(n):
        order = list(loops) if i % 2 == 0 else list(reversed(loops))
        for key in order:
            ticket = ticket_queued(support)
            with CaptureQueriesContext(connection) as capture:
                started = time.process_time()
                loops[key].agent_run_ticket(ticket_id=ticket.pk, provider=OfflineProvider())
                cpu[key].append(time.process_time() - started)
            statements[key].append(len(capture.captured_queries))
            demo_ticket_settle(ticket, support)
    return {k: (statistics.median(cpu[k]) * 1000, statistics.median(statements[k]), max(statements[k])) for k in loops}


def trace_writes(n: int, support, tracings: dict, events: int) -> dict:
    """One write of `events` events of a running ticket, under its run's lock (as a persist does)."""
    from refundagent.models import Ticket

    ticket = Ticket.objects.filter(trace_events__isnull=False).order_by("-pk").first()
    cpu = {k: [] for k in tracings}
    for i in range(n):
        order = list(tracings) if i % 2 == 0 else list(reversed(tracings))
        for key in order:
            tracing = tracings[key]
            batch = [
                tracing.trace_event_build(ticket=ticket, sensitive=[], span="tool", reason=f"bench {k}")
                for k in range(events)
            ]
            with transaction.atomic():
                started = time.process_time()
                tracing.trace_events_write(batch, locked=True)
                cpu[key].append(time.process_time() - started)
                transaction.set_rollback(True)
    return {k: statistics.median(v) * 1e6 for k, v in cpu.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", required=True, help="the git revision to compare with")
    parser.add_argument("--tickets", type=int, default=40, help="tickets run by each version")
    parser.add_argument("--writes", type=int, default=2000, help="trace writes timed by each version")
    args = parser.parse_args()

    old = old_modules(args.against)
    new = {name: importlib.import_module(name) for name in MODULES}
    with scratch_database("loop_cpu") as support:
        loops = {"old": old["refundagent.agent.loop"], "new": new["refundagent.agent.loop"]}
        tracings = {"old": old["refundagent.tracing"], "new": new["refundagent.tracing"]}
        runs(3, support, loops)  # warm-up: imports, caches
        ticket = runs(args.tickets, support, loops)
        writes = {k: trace_writes(args.writes, support, tracings, k) for k in (1, 3)}

    print(f"agent loop, offline provider, {args.tickets} tickets each, old = {args.against}, taking turns")
    print(f"{'':6} {'CPU ms/ticket':>13} {'statements':>10} {'max':>4} | {'write 1 ev us':>13} {'write 3 ev us':>13}")
    for key in ("old", "new"):
        ms, q, qmax = ticket[key]
        print(f"{key:6} {ms:>13.2f} {q:>10.0f} {qmax:>4} | {writes[1][key]:>13.0f} {writes[3][key]:>13.0f}")
    print(
        f"new/old {ticket['new'][0] / ticket['old'][0]:>13.3f} {'':>15} | "
        f"{writes[1]['new'] / writes[1]['old']:>13.3f} {writes[3]['new'] / writes[3]['old']:>13.3f}"
    )


if __name__ == "__main__":
    main()
