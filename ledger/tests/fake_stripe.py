"""A local Stripe-compatible HTTP server for tests (standard library only), driven by the real
`stripe` SDK through STRIPE_API_BASE.

It implements what the ledger uses: POST /v1/refunds (honouring Idempotency-Key like Stripe:
the same key and parameters replay the first answer, other parameters answer 400
idempotency_error), GET /v1/refunds (newest first, filters payment_intent / charge /
created[gte], limit + starting_after pages), GET /v1/refunds/{id}, and the payments refunds are
made against: GET /v1/payment_intents/{id} (its latest charge expanded) and GET /v1/charges/{id},
per account, with what the fake's refunds took back (`add_payment`; `payments_follow_ledger`
adds every payment the shops record, as if each was paid at Stripe). Faults are queued per
POST (`fail_next(...)`): "drop" (the refund is made, then the connection is closed without an
answer), "500", "402" (card_declined) and "400"; `delay` seconds are slept on every call.
Every call is recorded in `calls`.
"""

import hashlib
import hmac
import itertools
import threading
import time
from urllib.parse import parse_qsl, urlsplit

from ledger.tests.fake_server import FakeServer, JSONHandler


def sign_webhook(payload: bytes, secret: str, timestamp: int | None = None) -> str:
    """The Stripe-Signature header Stripe would send for this payload."""
    timestamp = int(time.time()) if timestamp is None else timestamp
    signed = f"{timestamp}.".encode() + payload
    return f"t={timestamp},v1={hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()}"


class FakeStripe(FakeServer):
    def __init__(self):
        self.refunds: dict[str, dict] = {}
        # (account, pi_…/ch_…) -> the payment: amount and currency as paid, metadata, Connect destination.
        self.payments: dict[tuple[str, str], dict] = {}
        self.disputes: dict[str, dict] = {}
        self.idempotency: dict[tuple[str, str], tuple[dict, int, dict]] = {}
        self.calls: list[dict] = []
        self.faults: list[str] = []
        self.delay = 0.0
        self.refund_status = "succeeded"
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        self._ids = itertools.count(1)
        self._clock = itertools.count(int(time.time()))
        super().__init__()

    def fail_next(self, *faults: str):
        self.faults.extend(faults)

    def posts(self) -> list[dict]:
        return [c for c in self.calls if c["method"] == "POST"]

    def add_refund(
        self,
        *,
        payment_intent="",
        charge="",
        amount: int,
        currency="usd",
        status="succeeded",
        metadata=None,
        account="",
        created: int | None = None,
    ) -> dict:
        """A refund made at Stripe outside the product (by hand in the dashboard)."""
        with self.lock:
            return self._make_refund(
                {"payment_intent": payment_intent, "charge": charge, "amount": str(amount)},
                metadata or {},
                account,
                status=status,
                currency=currency,
                created=created,
            )

    def add_payment(
        self,
        payment_ref: str,
        *,
        amount: int,
        currency="usd",
        account="",
        metadata=None,
        destination="",
        disputed=False,
    ) -> dict:
        """A payment made at Stripe (pi_… or ch_…); the same reference again on one account adds to
        it (tests share `pi_test` across orders)."""
        with self.lock:
            payment = self.payments.get((account, payment_ref))
            if payment is None:
                payment = self.payments[(account, payment_ref)] = {
                    "amount": 0,
                    "currency": currency.lower(),
                    "metadata": dict(metadata or {}),
                    "destination": destination,
                    "disputed": disputed,
                }
            payment["amount"] += amount
            return payment

    def add_dispute(
        self,
        *,
        charge="",
        payment_intent="",
        amount: int,
        currency="usd",
        status="needs_response",
        is_charge_refundable=False,
        reason="fraudulent",
        account="",
        created: int | None = None,
    ) -> dict:
        """A dispute the customer's bank opened on a payment (also marks the payment disputed)."""
        with self.lock:
            dispute = {
                "id": f"dp_fake{next(self._ids):06d}",
                "object": "dispute",
                "amount": amount,
                "currency": currency,
                "charge": charge or f"ch_of_{payment_intent}",
                "payment_intent": payment_intent or None,
                "status": status,
                "reason": reason,
                "is_charge_refundable": is_charge_refundable,
                "created": created if created is not None else next(self._clock),
                "_account": account,
            }
            self.disputes[dispute["id"]] = dispute
            for ref in (charge, payment_intent):
                if (account, ref) in self.payments:
                    self.payments[(account, ref)]["disputed"] = True
            return dispute

    def _payment_object(self, account: str, payment_ref: str, expand: bool) -> dict | None:
        payment = self.payments.get((account, payment_ref))
        if payment is None:
            return None
        field = "payment_intent" if payment_ref.startswith("pi_") else "charge"
        refunded = sum(
            r["amount"]
            for r in self.refunds.values()
            if r["_account"] == account and r[field] == payment_ref and r["status"] in ("pending", "succeeded")
        )
        charge_id = payment_ref if field == "charge" else f"ch_of_{payment_ref}"
        charge = {
            "id": charge_id,
            "object": "charge",
            "amount": payment["amount"],
            "amount_captured": payment["amount"],
            "amount_refunded": refunded,
            "currency": payment["currency"],
            "disputed": payment["disputed"],
            "refunded": refunded >= payment["amount"],
            "payment_intent": payment_ref if field == "payment_intent" else None,
            "metadata": payment["metadata"],
            "transfer_data": {"destination": payment["destination"]} if payment["destination"] else None,
        }
        if field == "charge":
            return charge
        return {
            "id": payment_ref,
            "object": "payment_intent",
            "amount": payment["amount"],
            "amount_received": payment["amount"],
            "currency": payment["currency"],
            "status": "succeeded",
            "latest_charge": charge if expand else charge_id,
            "metadata": payment["metadata"],
            "transfer_data": {"destination": payment["destination"]} if payment["destination"] else None,
        }

    def _make_refund(self, params, metadata, account, *, status=None, currency="usd", created=None) -> dict:
        refund_id = f"re_fake{next(self._ids):06d}"
        refund = {
            "id": refund_id,
            "object": "refund",
            "amount": int(params["amount"]),
            "currency": currency,
            "payment_intent": params.get("payment_intent") or None,
            "charge": params.get("charge") or None,
            "metadata": dict(metadata),
            "status": status or self.refund_status,
            "created": created if created is not None else next(self._clock),
            "failure_reason": None,
            "_account": account,
        }
        self.refunds[refund_id] = refund
        return refund

    @staticmethod
    def public(refund: dict) -> dict:
        return {k: v for k, v in refund.items() if not k.startswith("_")}

    def _handler(self):
        fake = self

        class Handler(JSONHandler):
            def _send(self, status: int, body: dict, headers: dict | None = None):
                super()._send(status, body, {"Request-Id": f"req_{next(fake._ids)}", **(headers or {})})

            def _error(self, status: int, type_: str, message: str, code: str = "", extra: dict | None = None):
                self._send(
                    status, {"error": {"type": type_, "message": message, "code": code or None, **(extra or {})}}
                )

            def _enter(self, params):
                with fake.lock:
                    fake.calls.append(
                        {
                            "method": self.command,
                            "path": urlsplit(self.path).path,
                            "params": params,
                            "idempotency_key": self.headers.get("Idempotency-Key"),
                            "account": self.headers.get("Stripe-Account") or "",
                            "authorization": self.headers.get("Authorization"),
                        }
                    )
                    fake.in_flight += 1
                    fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
                if fake.delay:
                    time.sleep(fake.delay)

            def _leave(self):
                with fake.lock:
                    fake.in_flight -= 1

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                params = dict(parse_qsl(self.rfile.read(length).decode(), keep_blank_values=True))
                self._enter(params)
                try:
                    if urlsplit(self.path).path != "/v1/refunds":
                        return self._error(404, "invalid_request_error", "Unrecognized request URL.")
                    self._create(params)
                finally:
                    self._leave()

            def _create(self, params):
                key = self.headers.get("Idempotency-Key") or ""
                account = self.headers.get("Stripe-Account") or ""
                with fake.lock:
                    fault = fake.faults.pop(0) if fake.faults else None
                    if fault == "500":
                        return self._error(500, "api_error", "Something went wrong on Stripe's end.")
                    if fault == "402":
                        return self._error(
                            402,
                            "card_error",
                            "Your card was declined.",
                            "card_declined",
                            {"decline_code": "generic_decline"},
                        )
                    if fault == "400":
                        return self._error(
                            400, "invalid_request_error", "Charge has already been refunded.", "charge_already_refunded"
                        )
                    stored = fake.idempotency.get((account, key)) if key else None
                    if stored is not None:
                        first_params, status, body = stored
                        if first_params != params:
                            return self._error(
                                400,
                                "idempotency_error",
                                "Keys for idempotent requests can only be used with the same parameters "
                                "they were first used with.",
                            )
                        return self._send(status, body, {"Idempotent-Replayed": "true"})
                    if not (params.get("payment_intent") or params.get("charge")) or not params.get("amount"):
                        return self._error(
                            400, "invalid_request_error", "Missing payment or amount.", "parameter_missing"
                        )
                    metadata = {k[len("metadata[") : -1]: v for k, v in params.items() if k.startswith("metadata[")}
                    refund = fake._make_refund(params, metadata, account)
                    body = fake.public(refund)
                    if key:
                        fake.idempotency[(account, key)] = (params, 200, body)
                if fault == "drop":
                    # The refund exists at the provider; the answer never reaches the caller.
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                self._send(200, body)

            def do_GET(self):
                parts = urlsplit(self.path)
                query = dict(parse_qsl(parts.query))
                self._enter(query)
                try:
                    if parts.path == "/v1/refunds":
                        return self._list(query)
                    if parts.path == "/v1/disputes":
                        account = self.headers.get("Stripe-Account") or ""
                        with fake.lock:
                            listed = [
                                fake.public(d)
                                for d in sorted(fake.disputes.values(), key=lambda d: d["created"], reverse=True)
                                if d["_account"] == account and d["created"] >= int(query.get("created[gte]") or 0)
                            ]
                        return self._send(
                            200, {"object": "list", "url": "/v1/disputes", "has_more": False, "data": listed}
                        )
                    if parts.path.startswith("/v1/refunds/"):
                        refund = fake.refunds.get(parts.path.rsplit("/", 1)[1])
                        if refund is None:
                            return self._error(404, "invalid_request_error", "No such refund.", "resource_missing")
                        return self._send(200, fake.public(refund))
                    for prefix in ("/v1/payment_intents/", "/v1/charges/"):
                        if parts.path.startswith(prefix):
                            account = self.headers.get("Stripe-Account") or ""
                            expand = any(key.startswith("expand") for key in query)
                            with fake.lock:
                                found = fake._payment_object(account, parts.path[len(prefix) :], expand)
                            if found is None:
                                return self._error(404, "invalid_request_error", "No such payment.", "resource_missing")
                            return self._send(200, found)
                    return self._error(404, "invalid_request_error", "Unrecognized request URL.")
                finally:
                    self._leave()

            def _list(self, query):
                account = self.headers.get("Stripe-Account") or ""
                with fake.lock:
                    refunds = sorted(fake.refunds.values(), key=lambda r: (r["created"], r["id"]), reverse=True)
                refunds = [r for r in refunds if r["_account"] == account]
                for field in ("payment_intent", "charge"):
                    if query.get(field):
                        refunds = [r for r in refunds if r[field] == query[field]]
                if query.get("created[gte]"):
                    refunds = [r for r in refunds if r["created"] >= int(query["created[gte]"])]
                if query.get("starting_after"):
                    ids = [r["id"] for r in refunds]
                    if query["starting_after"] in ids:
                        refunds = refunds[ids.index(query["starting_after"]) + 1 :]
                limit = min(int(query.get("limit") or 10), 100)
                page = refunds[:limit]
                self._send(
                    200,
                    {
                        "object": "list",
                        "url": "/v1/refunds",
                        "has_more": len(refunds) > limit,
                        "data": [fake.public(r) for r in page],
                    },
                )

        return Handler


def payments_follow_ledger(fake: FakeStripe):
    """Every provider payment the shops record (ledger Payment rows, now and while this runs) is
    known to `fake` as paid at Stripe on the shop's account. Returns the function that stops it."""
    from django.db.models.signals import post_save

    from ledger.models import Payment
    from ledger.money import to_minor_units

    def add(payment):
        if payment.payment_ref.startswith(("pi_", "ch_", "py_")):
            fake.add_payment(
                payment.payment_ref,
                amount=to_minor_units(payment.amount, payment.currency),
                currency=payment.currency,
                account=payment.order.tenant.stripe_account,
            )

    def on_save(sender, instance, created, **kwargs):
        if created:
            add(instance)

    try:
        for payment in Payment.objects.select_related("order__tenant"):
            add(payment)
    except Exception:  # noqa: BLE001 - no database in this test: nothing recorded yet
        pass
    post_save.connect(on_save, sender=Payment, weak=False, dispatch_uid=f"fake-stripe-{id(fake)}")
    return lambda: post_save.disconnect(sender=Payment, dispatch_uid=f"fake-stripe-{id(fake)}")
