"""Fixtures for the ledger tests. The data builders (tenant, customer, card, make_order) are in the root conftest."""

import threading

import pytest
from django.db import connection


def _run_concurrently(fn, args_list):
    """Run fn(*args) in one thread each, released together; returns the results (or exceptions)."""
    barrier = threading.Barrier(len(args_list))
    results = [None] * len(args_list)

    def worker(i, args):
        try:
            barrier.wait()
            results[i] = fn(*args)
        except Exception as exc:  # noqa: BLE001 - the test inspects what each worker got
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i, a)) for i, a in enumerate(args_list)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a worker hung (deadlock?)"
    return results


@pytest.fixture
def run_concurrently():
    """run_concurrently(fn, [args, ...]): one thread per args, released together; results or exceptions."""
    return _run_concurrently
