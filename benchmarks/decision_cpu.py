"""The CPU of the runtime's decision on a draft (refundagent.agent.decision.agent_draft_decide),
in process, with the offline provider; optionally against the code of another commit, the two
taking turns in one run (the machine is noisy: only ratios side by side mean anything).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/refundagent .venv/bin/python benchmarks/decision_cpu.py
    ... benchmarks/decision_cpu.py --base <commit>     # paired: the decision's modules at <commit>

Works in a scratch database (created and dropped here). Files tickets through the service, as
agent_overhead.py does, each run to approval_required, and times each decision with
time.process_time (its stop of the run included: it runs inside the decision's transaction),
counting its statements. With --base, the decision and the modules it reads through (MODULES)
are also loaded from <commit>, side by side with the current ones; each ticket is decided by one
or the other in turn.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "refundagent.config.settings")

import django  # noqa: E402

django.setup()

from _bench import demo_ticket_file, demo_ticket_settle, modules_at, scratch_database  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

# The decision and what it reads and writes through: loaded from --base side by side.
MODULES = (
    "refundagent/agent/decision.py",
    "approvals/gate.py",
    "approvals/risk.py",
    "approvals/decision_records.py",
    "approvals/services/requests.py",
    "ledger/selectors.py",
    "refundagent/selectors.py",
)


def decide_at(commit: str):
    """agent_draft_decide as it was at `commit` (MODULES at that commit, beside the current ones)."""
    return modules_at(commit, MODULES)["refundagent.agent.decision"].agent_draft_decide


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tickets", type=int, default=40, help="tickets decided per code version")
    parser.add_argument("--base", default="", help="a commit whose decision takes turns with the current one")
    args = parser.parse_args()

    with scratch_database("decision_bench") as support:
        from refundagent.agent import loop
        from refundagent.agent.providers.offline import OfflineProvider

        versions = {"current": loop.agent_draft_decide}
        if args.base:
            versions[args.base] = decide_at(args.base)
        cpu_ms = {name: [] for name in versions}
        statements = {name: [] for name in versions}
        chosen = ["current"]

        def timed(**kwargs):
            connection.queries_log.clear()
            with CaptureQueriesContext(connection) as capture:
                started = time.process_time()
                try:
                    return versions[chosen[0]](**kwargs)
                finally:
                    cpu_ms[chosen[0]].append((time.process_time() - started) * 1000)
                    statements[chosen[0]].append(len(capture.captured_queries))

        def one(name):
            chosen[0] = name
            demo_ticket_settle(demo_ticket_file(support), support)

        original_provider, original_decide = loop.provider_get, loop.agent_draft_decide
        loop.provider_get, loop.agent_draft_decide = (lambda name=None: OfflineProvider()), timed
        try:
            names = list(versions)
            for _ in range(3):  # warm-up: imports, caches built once per process
                for name in names:
                    one(name)
            for values in (*cpu_ms.values(), *statements.values()):
                values.clear()
            for k in range(args.tickets):
                for name in names if k % 2 == 0 else reversed(names):
                    one(name)
        finally:
            loop.provider_get, loop.agent_draft_decide = original_provider, original_decide

    print(f"agent_draft_decide, offline provider, {args.tickets} tickets per version, CPU (process_time)")
    for name in versions:
        print(
            f"{name:>12}: median {statistics.median(cpu_ms[name]):6.2f} ms, min {min(cpu_ms[name]):6.2f} ms, "
            f"statements {sorted(set(statements[name]))}"
        )
    if args.base:
        paired = [new / old for new, old in zip(cpu_ms["current"], cpu_ms[args.base], strict=True)]
        print(f"current / {args.base}: median of paired ratios {statistics.median(paired):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
