"""PAYMENT_GATEWAY is strict: an unknown gateway, or stripe without a key, refuses to start."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_check(**env):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("PAYMENT_", "STRIPE_"))}
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"PAYMENT_GATEWAY": "paypal"}, "PAYMENT_GATEWAY must be 'manual', 'stripe' or 'shopify'"),
        ({"PAYMENT_GATEWAY": "stripe"}, "STRIPE_API_KEY must be set"),
        ({"PAYMENT_GATEWAY": "manual", "STRIPE_TIMEOUT_SECONDS": "soon"}, "STRIPE_TIMEOUT_SECONDS must be an integer"),
        ({"STRIPE_WEBHOOK_TOLERANCE_SECONDS": "0"}, "STRIPE_WEBHOOK_TOLERANCE_SECONDS must be > 0"),
    ],
)
def test_a_bad_payment_configuration_refuses_to_start(env, message):
    result = run_check(**env)
    assert result.returncode != 0 and message in result.stderr


def test_stripe_with_a_key_starts():
    result = run_check(PAYMENT_GATEWAY="Stripe", STRIPE_API_KEY="sk_test_x", STRIPE_API_BASE="http://127.0.0.1:1")
    assert result.returncode == 0, result.stderr
