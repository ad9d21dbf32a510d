"""Outside DEBUG a missing page is the product's own 404 (in the site's layout), never Django's
yellow technical page; with DEBUG on, the development server keeps its technical page."""

import pytest

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("path", ["/no-such-page/", "/tickets/999999/", "/evals/runs/999999/"])
def test_a_missing_page_outside_debug_is_the_products_404(client, user, settings, path):
    settings.DEBUG = False
    # Each page as someone whose role may read it (the support pages refuse the operator: 403).
    client.force_login(user("acme-support" if path.startswith("/tickets/") else "ops"))
    response = client.get(path)
    html = response.content.decode()
    assert response.status_code == 404
    assert "Using the URLconf" not in html and "technical_404" not in html and "Django tried" not in html
    assert 'class="error-page card"' in html and "Nothing here" in html
