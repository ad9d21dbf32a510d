"""ledger.retry.retry_delay: the one backoff of every layer's retries."""

import time

from ledger.retry import retry_delay


def test_the_first_failure_waits_the_first_wait_and_each_further_one_doubles_it():
    waits = [retry_delay(attempts=attempts, first=30, cap=900) for attempts in range(0, 7)]
    assert waits == [30, 30, 60, 120, 240, 480, 900]


def test_the_wait_never_passes_its_cap_however_often_a_step_failed():
    started = time.monotonic()
    assert retry_delay(attempts=10**9, first=1, cap=3600) == 3600
    assert retry_delay(attempts=10**9, first=0.5, cap=10**6) == 10**6
    # no huge number is made on the way
    assert time.monotonic() - started < 0.1


def test_no_first_wait_means_no_wait():
    assert retry_delay(attempts=5, first=0, cap=900) == 0
