"""Screens a support agent and a finance reviewer use, at a laptop's 1280x800 and a phone's
390x844: no page wider than the window, and the API docs with no network. Playwright drives
Debian's chromium (launch settings shared with test_browser.py) against the live server on the
demo data. Screenshots go to artifacts/screens/ (their paths are printed; CI keeps the folder)."""

from pathlib import Path
from urllib.parse import urlparse

from django.conf import settings

from refundagent.tests.test_browser import (  # noqa: F401 - the shared launch fixtures
    _sync_orm_under_playwright,
    browser_type_launch_args,
    pytestmark,
    registry,
)

SCREENS = Path(settings.BASE_DIR) / "artifacts" / "screens"
SIZES = {"1280": {"width": 1280, "height": 800}, "390": {"width": 390, "height": 844}}


def shot(page, name):
    SCREENS.mkdir(parents=True, exist_ok=True)
    path = SCREENS / name
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")


def offline(page, live_server) -> list[str]:
    """Every request to a host other than the live server's is refused, as with no network;
    the list collects what was attempted."""
    local = urlparse(live_server.url).netloc
    attempted = []

    def route(route_):
        if urlparse(route_.request.url).netloc == local:
            return route_.continue_()
        attempted.append(route_.request.url)
        return route_.abort("internetdisconnected")

    page.route("**/*", route)
    return attempted


def test_the_api_docs_load_with_no_network(live_server, page, registry, demo):  # noqa: F811
    from playwright.sync_api import expect

    # given a browser with no network beyond the server
    attempted = offline(page, live_server)
    page.set_viewport_size(SIZES["1280"])
    # when it opens the API docs
    page.goto(f"{live_server.url}/api/docs")
    # then Swagger UI renders the API from files the server serves itself
    expect(page.locator(".swagger-ui .information-container .title")).to_be_visible(timeout=15_000)
    expect(page.locator(".opblock").first).to_be_visible()
    shot(page, "api-docs-1280.png")
    assert attempted == []
