"""A fake Shopify Admin API (2026-04) for tests: see server.py."""

from .server import API_VERSION, FakeShopify

__all__ = ["API_VERSION", "FakeShopify"]
