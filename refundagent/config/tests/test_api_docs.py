"""/api/docs is served from the server's own static files: Swagger UI needs no network."""

import re

import pytest
from django.contrib.staticfiles import finders

pytestmark = pytest.mark.django_db


def test_the_api_docs_page_loads_swagger_ui_from_the_servers_own_static_files(client):
    # when the docs page is asked for
    response = client.get("/api/docs")
    html = response.content.decode()
    # then every script and stylesheet it loads is a local static file that exists, none from a CDN
    assert response.status_code == 200
    sources = re.findall(r'(?:src|href)="([^"]+\.(?:js|css))"', html)
    assert sources, html
    for source in sources:
        assert source.startswith("/static/"), source
        assert finders.find(source.removeprefix("/static/")), source
    assert "cdn" not in html.lower()
