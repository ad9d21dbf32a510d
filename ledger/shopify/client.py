"""Shopify's Admin GraphQL API over plain `requests` (no Shopify SDK: the official one stops at
API 2024-10 and keeps its session in thread-local state).

- The token: the client-credentials grant (`POST {base}/admin/oauth/access_token`), reused until
  `TOKEN_MARGIN` before it expires, taken again once on a 401.
- Throttling: every answer carries `extensions.cost` (requested cost, throttleStatus). The client
  remembers the bucket and what each document cost last time, and waits before a query the bucket
  cannot afford now, rather than spend a round trip on THROTTLED. A THROTTLED, a 5xx, a timeout or
  a dropped connection is retried with backoff (`SHOPIFY_MAX_ATTEMPTS`): every mutation the
  product sends is `@idempotent`, so a retry never does the work twice.
- What is left after the retries raises `ShopifyUnavailable` (transient); a refusal of the
  credentials or a GraphQL error raises `ShopifyRefused` with Shopify's message.

The client secret and the token are never logged nor put in an exception's message.
"""

import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import requests
from django.conf import settings
from django.utils import timezone

from ..exceptions import PaymentProviderUnavailable, ShopifyRefused

logger = logging.getLogger(__name__)

TOKEN_MARGIN = timedelta(minutes=5)
FIRST_BACKOFF_SECONDS = 0.5


class ShopifyUnavailable(PaymentProviderUnavailable):
    """Shopify could not be reached or kept failing (5xx, timeouts, throttled): try again later."""


def shop_base(shop_domain: str) -> str:
    """`https://{shop}`, or SHOPIFY_API_BASE with the shop put in (tests and fakes)."""
    base = settings.SHOPIFY_API_BASE or "https://{shop}"
    return base.replace("{shop}", shop_domain).rstrip("/")


@dataclass
class Bucket:
    """What the last answer said of the shop's leaky bucket, and when."""

    available: float = 0.0
    maximum: float = 0.0
    restore_rate: float = 0.0
    at: float = 0.0

    def now_available(self, clock: float) -> float:
        return min(self.maximum, self.available + (clock - self.at) * self.restore_rate)


@dataclass
class Token:
    value: str
    expires_at: datetime


@dataclass
class Stats:
    calls: int = 0
    waits: int = 0
    waited_seconds: float = 0.0
    retries: int = 0
    throttled: int = 0
    costs: dict[str, float] = field(default_factory=dict)


class ShopifyClient:
    """One shop's API. `token_store(token)` is told each new token (the connection caches it,
    encrypted); `token` is a cached one to start from."""

    def __init__(
        self,
        *,
        shop_domain: str,
        client_id: str,
        client_secret: str,
        token: Token | None = None,
        token_store=None,
        sleep=time.sleep,
    ):
        self.shop_domain = shop_domain
        self._client_id = client_id
        self._client_secret = client_secret
        self._token = token
        self._token_store = token_store
        self._sleep = sleep
        self._lock = threading.Lock()
        self.bucket = Bucket()
        self.stats = Stats()
        self._costed_first: dict[str, int | None] = {}
        self.session = requests.Session()
        self.base = shop_base(shop_domain)

    def __repr__(self):
        return f"<ShopifyClient {self.shop_domain}>"

    # -- the token -----------------------------------------------------------------------------

    @property
    def current_token(self) -> Token | None:
        return self._token

    def token(self, *, fresh: bool = False) -> str:
        with self._lock:
            if not fresh and self._token and self._token.expires_at - TOKEN_MARGIN > timezone.now():
                return self._token.value
            self._token = self._take_token()
            if self._token_store is not None:
                self._token_store(self._token)
            return self._token.value

    def _take_token(self) -> Token:
        url = f"{self.base}/admin/oauth/access_token"
        data = {"grant_type": "client_credentials", "client_id": self._client_id, "client_secret": self._client_secret}
        try:
            response = self._post(url, data=data)
        except requests.RequestException as exc:
            raise ShopifyUnavailable(f"Shopify token endpoint of {self.shop_domain}: {type(exc).__name__}") from None
        if response.status_code >= 500 or response.status_code == 429:
            raise ShopifyUnavailable(f"Shopify token endpoint of {self.shop_domain}: HTTP {response.status_code}")
        body = _json(response)
        if response.status_code != 200 or not body.get("access_token"):
            reason = body.get("error_description") or body.get("error") or body.get("errors") or "no access token"
            raise ShopifyRefused(
                f"Shopify refused the credentials for {self.shop_domain} (HTTP {response.status_code}): {reason}",
                code="shopify_credentials_refused",
            )
        expires_in = int(body.get("expires_in") or 0) or 3600
        return Token(value=body["access_token"], expires_at=timezone.now() + timedelta(seconds=expires_in))

    def _post(self, url: str, **kwargs) -> requests.Response:
        self.stats.calls += 1
        return self.session.post(url, timeout=settings.SHOPIFY_TIMEOUT_SECONDS, **kwargs)

    # -- GraphQL -------------------------------------------------------------------------------

    def graphql(self, query: str, variables: dict | None = None) -> dict:
        """The `data` of one GraphQL call, with the waits and retries of the module doc."""
        url = f"{self.base}/admin/api/{settings.SHOPIFY_API_VERSION}/graphql.json"
        payload = {"query": query, "variables": variables or {}}
        refreshed = False
        backoff = FIRST_BACKOFF_SECONDS
        problem = ""
        attempt = 0
        while attempt < settings.SHOPIFY_MAX_ATTEMPTS:
            attempt += 1
            self._wait_for_bucket(query, variables)
            headers = {"X-Shopify-Access-Token": self.token(), "Content-Type": "application/json"}
            try:
                response = self._post(url, json=payload, headers=headers)
            except requests.RequestException as exc:
                problem = type(exc).__name__
                self._retry_pause(backoff)
                backoff *= 2
                continue
            if response.status_code == 401 and not refreshed:
                # An expired or revoked token: take a new one, once, and ask again.
                refreshed = True
                attempt -= 1
                self.token(fresh=True)
                continue
            if response.status_code == 429 or response.status_code >= 500:
                problem = f"HTTP {response.status_code}"
                self._retry_pause(float(response.headers.get("Retry-After") or backoff))
                backoff *= 2
                continue
            body = _json(response)
            if response.status_code != 200:
                raise ShopifyRefused(
                    f"Shopify ({self.shop_domain}) answered HTTP {response.status_code}: {body.get('errors') or ''}"
                )
            self._remember_cost(query, variables, body.get("extensions") or {})
            errors = body.get("errors") or []
            if any((e.get("extensions") or {}).get("code") == "THROTTLED" for e in errors):
                self.stats.throttled += 1
                problem = "THROTTLED"
                self._wait_for_bucket(query, variables, at_least_one=True)
                continue
            if errors:
                messages = "; ".join(str(e.get("message")) for e in errors)
                raise ShopifyRefused(f"Shopify ({self.shop_domain}): {messages}", code="shopify_graphql_error")
            return body.get("data") or {}
        raise ShopifyUnavailable(f"Shopify ({self.shop_domain}) after {attempt} attempts: {problem}")

    def _retry_pause(self, seconds: float) -> None:
        self.stats.retries += 1
        self._sleep(min(seconds, 30.0))

    def _remember_cost(self, query: str, variables: dict | None, extensions: dict) -> None:
        cost = extensions.get("cost") or {}
        status = cost.get("throttleStatus") or {}
        if cost.get("requestedQueryCost") is not None:
            self.stats.costs[query] = float(cost["requestedQueryCost"])
            self._costed_first[query] = (variables or {}).get("first")
        if status:
            self.bucket = Bucket(
                available=float(status.get("currentlyAvailable") or 0),
                maximum=float(status.get("maximumAvailable") or 0),
                restore_rate=float(status.get("restoreRate") or 0),
                at=time.monotonic(),
            )

    def _cost_expected(self, query: str, variables: dict | None) -> float | None:
        """What this document cost last time, scaled to this call's `first` (a page that grows
        costs more: waiting for the last, smaller page's cost would be answered THROTTLED)."""
        cost = self.stats.costs.get(query)
        first, then = (variables or {}).get("first"), self._costed_first.get(query)
        if cost is not None and isinstance(first, int) and isinstance(then, int) and then > 0:
            return cost * first / then
        return cost

    def _wait_for_bucket(self, query: str, variables: dict | None, *, at_least_one: bool = False) -> None:
        """Sleep until the bucket holds what this call is expected to cost (nothing known: go)."""
        need = self._cost_expected(query, variables)
        if need is None or not self.bucket.restore_rate:
            if at_least_one:
                self._retry_pause(FIRST_BACKOFF_SECONDS)
            return
        available = self.bucket.now_available(time.monotonic())
        if available >= need and not at_least_one:
            return
        seconds = max(need - available, 0) / self.bucket.restore_rate + 0.05
        # Never longer than an empty bucket takes to refill (a stale or odd status cannot hang a run).
        if self.bucket.maximum:
            seconds = min(seconds, self.bucket.maximum / self.bucket.restore_rate + 0.05)
        self.stats.waits += 1
        self.stats.waited_seconds += seconds
        self._sleep(seconds)


def _json(response: requests.Response) -> dict:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
