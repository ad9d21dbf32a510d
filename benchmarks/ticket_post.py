"""The web's CPU per filing: POST /api/tickets in process, through Django's test client (the
whole middleware stack, token authentication, ninja, the view and the Celery publish after
commit), on a scratch database. Prints the median CPU time per POST and the SQL statements one
POST runs (BEGIN/COMMIT included).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_post CELERY_BROKER_URL=redis://127.0.0.1:6379/0 \
        .venv/bin/python benchmarks/ticket_post.py [--posts 300]

The database is migrated and seeded with the demo; the broker's queue gets one message per POST
(nothing consumes it: purge it afterwards, or use a Redis database of its own).
"""

import argparse
import json
import statistics
import time

from _bench import database_url, django_setup

BODY = {
    "order": "ORD-5001",
    "customer": "CUST-1001",
    "message": "My headphones arrived broken, please refund.",
    "requested_amount": "120.00",
}


def setup():
    """Django on DATABASE_URL's database, the demo seeded, an API client of acme-support."""
    django_setup(database_url(), API_THROTTLE_RATE="1000000/min")
    from django.core.management import call_command
    from django.test import Client

    from refundagent.demo import demo_seed

    demo_seed()
    import io

    out = io.StringIO()
    call_command("create_api_token", "acme-support", stdout=out)
    token = out.getvalue().strip().splitlines()[-1].strip()
    return Client(HTTP_AUTHORIZATION=f"Bearer {token}")


def ticket_post(client, body=BODY) -> tuple[float, int, object]:
    """One POST: (its CPU seconds, its SQL statements, the response)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    payload = json.dumps(body)
    with CaptureQueriesContext(connection) as queries:
        started = time.process_time()
        response = client.post("/api/tickets", payload, content_type="application/json", secure=True)
        cpu = time.process_time() - started
    assert response.status_code == 201, response.content
    return cpu, len(queries), response


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--posts", type=int, default=300)
    args = parser.parse_args()
    client = setup()
    for _ in range(20):  # warm: imports, prepared statements, the broker connection
        ticket_post(client)
    cpus, counts = [], set()
    for _ in range(args.posts):
        cpu, count, _ = ticket_post(client)
        cpus.append(cpu)
        counts.add(count)
    print(
        f"ticket POST: {args.posts} posts, median_cpu_ms={statistics.median(cpus) * 1000:.2f} "
        f"statements_per_post={sorted(counts)}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
