"""Fixtures of the Zendesk tests: the fake Zendesk over HTTP and a connected tenant."""

import pytest

from .fake_zendesk import FakeZendesk

AGENT_EMAIL = "agent@shop.example"
API_TOKEN = "zd-token-SECRET-6f1c2a9b"
WEBHOOK_SECRET = "zd-webhook-SECRET-91ab77"
ACCOUNT_ID = 88888888


@pytest.fixture
def fake_zendesk(settings):
    server = FakeZendesk().start()
    settings.ZENDESK_API_BASE = server.url
    settings.ZENDESK_TIMEOUT_SECONDS = 5
    settings.SITE_URL = "https://refunds.shop.example"
    yield server
    server.stop()


@pytest.fixture
def zendesk_connection(tenant, fake_zendesk):
    from refundagent.zendesk.services import zendesk_connect

    fake_zendesk.add_agent(AGENT_EMAIL, API_TOKEN)
    return zendesk_connect(
        tenant_slug=tenant.slug,
        subdomain="shop",
        email=AGENT_EMAIL,
        api_token=API_TOKEN,
        webhook_secret=WEBHOOK_SECRET,
        account_id=ACCOUNT_ID,
    )
