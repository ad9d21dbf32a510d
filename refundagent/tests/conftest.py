"""Fixtures for the refundagent tests: the fake Anthropic Messages API server, the local SMTP
server, and an order paid two ways (gift card and card) for the split-tender tests."""

from refundagent.tests.fake_anthropic import fake_anthropic  # noqa: F401
from refundagent.tests.fake_smtp import smtp_server  # noqa: F401, E402
from refundagent.tests.inbox_support import inbox  # noqa: F401, E402
from refundagent.tests.payments_support import gift_card, split_order  # noqa: F401, E402
from refundagent.tests.zendesk_support import fake_zendesk, zendesk_connection  # noqa: F401, E402
