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
import importlib
import os
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "refundagent.config.settings")

import django  # noqa: E402

django.setup()

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
    """agent_draft_decide as it was at `commit`: MODULES' sources at that commit, executed as
    copies beside the current modules, each copy's imports from the others pointed at the copies."""
    copies = {}
    for path in MODULES:
        name = path[:-3].replace("/", ".")
        source = subprocess.run(
            ["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
        current = importlib.import_module(name)
        copy = types.ModuleType(f"{name}@{commit}")
        copy.__package__, copy.__file__ = name.rpartition(".")[0], current.__file__
        exec(compile(source, f"{path}@{commit}", "exec"), copy.__dict__)
        copies[name] = (current, copy)
    for _, copy in copies.values():
        for key, value in list(copy.__dict__.items()):
            for name, (current, other) in copies.items():
                if value is current:
                    copy.__dict__[key] = other
                elif getattr(value, "__module__", None) == name:
                    same = getattr(current, getattr(value, "__name__", ""), None) is value
                    if same and hasattr(other, value.__name__):
                        copy.__dict__[key] = getattr(other, value.__name__)
    return copies["refundagent.agent.decision"][1].agent_draft_decide


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tickets", type=int, default=40, help="tickets decided per code version")
    parser.add_argument("--base", default="", help="a commit whose decision takes turns with the current one")
    args = parser.parse_args()

    from django.conf import settings

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.AGENT_PROVIDER = "offline"
    from refundagent.config.celery import app

    app.conf.task_always_eager = True
    connection.settings_dict.setdefault("TEST", {})["NAME"] = f"{connection.settings_dict['NAME']}_decision_bench"
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    try:
        from django.contrib.auth import get_user_model

        from refundagent.agent import loop
        from refundagent.agent.providers.offline import OfflineProvider
        from refundagent.demo import demo_seed
        from refundagent.models import Ticket
        from refundagent.services import ticket_close, ticket_create, ticket_escalate

        demo_seed()
        support = get_user_model().objects.get(username="acme-support")
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
            ticket = ticket_create(
                user=support,
                order="ORD-5001",
                customer="CUST-1001",
                message="My headphones arrived broken, please refund $200.",
                requested_amount="200.00",
            )
            ticket.refresh_from_db()
            assert ticket.status == Ticket.Status.APPROVAL_REQUIRED, (ticket.status, ticket.stop_detail)
            # As agent_overhead.py: the demo policy's risk rules would escalate the next ticket.
            ticket_escalate(ticket=ticket, user=support)
            ticket_close(ticket=Ticket.objects.get(pk=ticket.pk), user=support)

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
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)

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
