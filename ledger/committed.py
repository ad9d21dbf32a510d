"""What a request still does once its write has committed (its answer, its bookkeeping).

Once a write committed, an answer of 500 would tell the client that nothing happened: a client
that retries without an Idempotency-Key files the ticket twice, and finance believes an approval
failed. So what is left (the read that builds the answer, a keyed update) waits out a lost
database connection (a restart, a failover) for a while, with a fresh connection each time,
instead of failing at once.
"""

import time

from django.db import InterfaceError, OperationalError, connection

# How long a committed write's answer waits for the database to come back.
AFTER_COMMIT_WAIT_SECONDS = 30.0


def when_database_answers(work, *, within: float = AFTER_COMMIT_WAIT_SECONDS):
    """`work()` (idempotent), tried again on a lost connection until it answers or `within` seconds passed."""
    deadline = time.monotonic() + within
    pause = 0.2
    while True:
        try:
            return work()
        except (OperationalError, InterfaceError):
            if time.monotonic() + pause > deadline:
                raise
            connection.close()  # the broken connection; the next query opens a new one
            time.sleep(pause)
            pause = min(pause * 2, 2.0)
