"""Fixtures for the refundagent tests: the fake Anthropic Messages API server."""

from refundagent.tests.fake_anthropic import fake_anthropic  # noqa: F401
from refundagent.tests.fake_smtp import smtp_server  # noqa: F401, E402
