"""Writes to the ledger. `ledger_refund_issue` is the only function in the product that moves money."""

import hashlib
import json
import logging
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, IntegrityError, connections, transaction
from django.db.models import F, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from .exceptions import EntryStatusConflict, IdempotencyConflict, InvalidInput, RefundRefused
from .models import (
    COUNTING_STATUSES,
    STATUS_TRANSITIONS,
    Order,
    PaymentMethod,
    RefundEntry,
    RefundEntryEvent,
    RefundEntryItem,
    RefundRevision,
    RefundStatus,
)
from .money import CENT, ZERO, money_check_currency, money_parse
from .selectors import order_refund_position
from .signals import refund_entry_status_changed
from .telemetry import money_log, traced

logger = logging.getLogger(__name__)


def canonical_hash(args: dict) -> str:
    """SHA-256 of a JSON object with sorted keys and no whitespace: the same args, the same hash."""
    return hashlib.sha256(json.dumps(args, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def _entry_attributes(entry: RefundEntry) -> dict:
    return {
        "refund.ledger.entry_id": entry.pk,
        "refund.ledger.amount": entry.amount,
        "refund.ledger.currency": entry.currency,
        "refund.ledger.source": entry.source,
        "refund.approval.id": entry.approval_ref,
    }


# The ledger write's span: a refusal (RefundRefused, IdempotencyConflict) marks it failed.
@traced("refund.ledger.refund_issue", result=_entry_attributes)
def ledger_refund_issue(
    *,
    order: Order,
    amount,
    currency: str,
    idempotency_key: str,
    destination: PaymentMethod | None = None,
    destination_kind: str = "original",
    item_ids: list[str] | None = None,
    source: str = RefundEntry.Source.APPROVAL,
    approval_ref: str = "",
    reason: str = "",
    created_by=None,
) -> RefundEntry:
    """Record one refund, exactly once.

    The same key with the same arguments returns the entry already written and writes
    nothing; the same key with other arguments raises IdempotencyConflict. The order row is
    locked first, so the cap (order total minus what is already refunded, pending included, and
    for item refunds the price of the items not yet refunded) is computed under the lock.

    The entry's first status (appended as its first RefundEntryEvent too):
    - an approved refund to the original payment method under `PAYMENT_GATEWAY=stripe`:
      `pending` — it counts at once; `ledger.payouts.ledger_refund_payout` then calls the
      provider, outside this transaction, and records its answer;
    - to a gift card: store credit, `succeeded`, the card's balance grown in this transaction
      (except for imports: the shop's balance already holds that credit);
    - anything else (the `manual` gateway, imports, operator entries): `succeeded`, paid by hand.

    Two implementations, one behaviour (ledger/tests/test_issue_paths.py holds them to it):
    PostgreSQL runs the function of migration 0007 (`_issue_in_database`), SQLite the ORM
    (`_issue_with_orm`). What needs no database is checked here, once, for both.
    """
    amount = money_parse(amount, currency=currency)
    item_ids = list(item_ids or [])
    if not idempotency_key:
        raise InvalidInput("An idempotency key is required.", code="idempotency_key_required")
    request_hash = canonical_hash(
        {
            "order": order.pk,
            "amount": str(amount),
            "currency": currency,
            "destination": destination.pk if destination else None,
            "destination_kind": destination_kind,
            "items": sorted(item_ids),
            "source": str(source),
            "approval": str(approval_ref),
        }
    )
    gateway, status = _first_status(source=str(source), destination=destination, destination_kind=destination_kind)
    refund = _NewRefund(
        order=order,
        amount=amount,
        currency=currency,
        idempotency_key=idempotency_key,
        destination=destination,
        destination_kind=destination_kind,
        item_ids=item_ids,
        source=str(source),
        approval_ref=str(approval_ref),
        reason=reason,
        created_by=created_by,
        request_hash=request_hash,
        gateway=gateway,
        status=status,
    )
    if connections[DEFAULT_DB_ALIAS].vendor == "postgresql" and _database_takes(refund):
        return _issue_in_database(refund)
    return _issue_with_orm(refund)


@dataclass(frozen=True)
class _NewRefund:
    """A refund as `ledger_refund_issue` hands it to either implementation: its arguments
    parsed, hashed, and its first gateway and status chosen."""

    order: Order
    amount: Decimal
    currency: str
    idempotency_key: str
    destination: PaymentMethod | None
    destination_kind: str
    item_ids: list[str]
    source: str
    approval_ref: str
    reason: str
    created_by: object
    request_hash: str
    gateway: str
    status: str

    @property
    def grows_balance(self) -> bool:
        """Store credit grows the gift card's balance, except an import's (the shop's balance
        already holds that credit)."""
        return self.gateway == RefundEntry.Gateway.STORE_CREDIT and self.source != RefundEntry.Source.IMPORT


# RefundEntry's fields in the order the database function returns them (a test holds the two
# equal): the entry is built from its row as a queryset would build it.
_ENTRY_FIELDS = (
    "id",
    "tenant_id",
    "order_id",
    "amount",
    "currency",
    "destination_id",
    "destination_kind",
    "idempotency_key",
    "request_hash",
    "source",
    "approval_ref",
    "reason",
    "created_by_id",
    "created_at",
    "status",
    "status_changed_at",
    "gateway",
    "provider_ref",
    "needs_review",
)
# One constant statement: psycopg prepares it once per connection (DATABASE_PREPARED_STATEMENTS).
_ISSUE_SQL = (
    "SELECT * FROM ledger_refund_issue(%s::bigint, %s::numeric, %s::text, %s::text, %s::bigint, %s::bigint, "
    "%s::text, %s::text[], %s::text, %s::text, %s::text, %s::integer, %s::text, %s::text, %s::text, %s::boolean)"
)
# Where the entry's columns start in that row (after the outcome and the refusals' numbers).
_ENTRY_AT = 7
_CREATED_AT = _ENTRY_AT + _ENTRY_FIELDS.index("created_at")
# The columns the text arguments land in.
_KEY_LENGTH, _KIND_LENGTH, _SOURCE_LENGTH, _APPROVAL_LENGTH = (
    RefundEntry._meta.get_field(name).max_length
    for name in ("idempotency_key", "destination_kind", "source", "approval_ref")
)


def _database_takes(refund: _NewRefund) -> bool:
    """Whether the database function can take the refund's texts as they are. It cannot take a
    NUL byte or text that is not UTF-8 (psycopg refuses the parameter) and would fail on text
    longer than its column: those go the ORM way, which fails on them as it always has (a
    DataError, after the refusals it checks first; item ids it matches in Python)."""
    if (
        len(refund.idempotency_key) > _KEY_LENGTH
        or len(refund.destination_kind) > _KIND_LENGTH
        or len(refund.source) > _SOURCE_LENGTH
        or len(refund.approval_ref) > _APPROVAL_LENGTH
    ):
        return False
    r = refund
    text = "".join((r.currency, r.idempotency_key, r.destination_kind, r.source, r.approval_ref, r.reason, *r.item_ids))
    return "\x00" not in text and (text.isascii() or _utf8(text))


def _utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return True


# Why hand-written SQL here, and only here: this is the one write that moves money, and its
# throughput is the ledger's (issue 12). Through the ORM a refund was 7-8 round trips (BEGIN,
# lock, key, position, two INSERTs, COMMIT) and ~3.5 ms of compiling querysets in Python: ~6.5
# ms single-threaded, 0.04-0.07 of a raw INSERT+COMMIT's throughput. The function of migration
# 0007 does the same under the same lock in one statement (~1 ms, 5-8x the throughput). In
# autocommit that statement is its own transaction (its commit runs the deferred cap
# triggers); inside an outer atomic block it runs in it, without a savepoint: a refusal comes
# back as a row, so nothing was written and the transaction stays usable, and a key raced in by
# another order's writer is an ON CONFLICT.
def _issue_in_database(refund: _NewRefund) -> RefundEntry:
    order, destination, created_by = refund.order, refund.destination, refund.created_by
    destination_id = destination.pk if destination is not None else None
    created_by_id = created_by.pk if created_by is not None else None
    params = (
        order.pk,
        refund.amount,
        refund.currency,
        refund.idempotency_key,
        destination_id,
        destination.customer_id if destination is not None else None,
        refund.destination_kind,
        refund.item_ids,
        refund.source,
        refund.approval_ref,
        refund.reason,
        created_by_id,
        refund.request_hash,
        refund.gateway,
        refund.status,
        refund.grows_balance,
    )
    connection = connections[DEFAULT_DB_ALIAS]
    try:
        with connection.cursor() as cursor:
            cursor.execute(_ISSUE_SQL, params)
            row = cursor.fetchone()
    except IntegrityError as error:
        # Only a deferred constraint or trigger at the statement's own commit can get here (the
        # function checks what the immediate constraints would refuse, and a raced key is its ON
        # CONFLICT); inside an outer atomic block the transaction is aborted: nothing to read.
        if connection.in_atomic_block:
            raise
        return _replay_raced(refund, error)
    outcome = row[0]
    if outcome == "created":
        # The database gave it its id, tenant (the locked order's) and time; the rest is stored as given.
        entry_id, tenant_id, created_at = row[_ENTRY_AT], row[_ENTRY_AT + 1], row[_CREATED_AT]
        values = (
            entry_id,
            tenant_id,
            order.pk,
            refund.amount,
            refund.currency,
            destination_id,
            refund.destination_kind,
            refund.idempotency_key,
            refund.request_hash,
            refund.source,
            refund.approval_ref,
            refund.reason,
            created_by_id,
            created_at,
            refund.status,
            created_at,
            refund.gateway,
            "",
            False,
        )
        entry = RefundEntry.from_db(connection.alias, _ENTRY_FIELDS, values)
        # As RefundEntry.objects.create leaves them: no query to read them back.
        entry._state.fields_cache.update(order=order, destination=destination, created_by=created_by)
        return entry
    if outcome == "existing":
        return _replay(RefundEntry.from_db(connection.alias, _ENTRY_FIELDS, row[_ENTRY_AT:]), refund.request_hash)
    if outcome == "order_not_found":
        raise Order.DoesNotExist("Order matching query does not exist.")
    external_id, order_currency, total, refunded_total, items_value, unmatched = row[1:_ENTRY_AT]
    raise _refusal(
        outcome,
        amount=refund.amount,
        currency=refund.currency,
        external_id=external_id,
        order_currency=order_currency,
        total=total,
        refundable=None if refunded_total is None else max(total - refunded_total.quantize(CENT), ZERO),
        unmatched=[refund.item_ids[position - 1] for position in unmatched or ()],
        items_value=items_value,
    )


def _issue_with_orm(refund: _NewRefund) -> RefundEntry:
    r = refund
    try:
        with transaction.atomic():
            # Lock order: the order row first, always (see docs/ledger.md).
            locked = Order.objects.select_for_update().get(pk=r.order.pk)
            existing = RefundEntry.objects.filter(idempotency_key=r.idempotency_key).first()
            if existing is not None:
                return _replay(existing, r.request_hash)
            lines = _check_refund(locked, r.amount, r.currency, r.destination, r.item_ids)
            entry = RefundEntry.objects.create(
                tenant_id=locked.tenant_id,
                order=locked,
                amount=r.amount,
                currency=r.currency,
                destination=r.destination,
                destination_kind=r.destination_kind,
                idempotency_key=r.idempotency_key,
                request_hash=r.request_hash,
                source=r.source,
                approval_ref=r.approval_ref,
                reason=r.reason,
                created_by=r.created_by,
                gateway=r.gateway,
                status=r.status,
                status_changed_at=timezone.now(),
            )
            RefundEntryEvent.objects.create(
                entry=entry, from_status="", to_status=r.status, source=RefundEntryEvent.Source.ISSUE
            )
            RefundEntryItem.objects.bulk_create(
                RefundEntryItem(entry=entry, order_item_id=item_pk, quantity=quantity, amount=value)
                for item_pk, (quantity, value) in lines.items()
            )
            if r.grows_balance:
                # Lock order: the order row is held; the gift card row second.
                PaymentMethod.objects.filter(pk=r.destination.pk).update(
                    balance=Coalesce(F("balance"), Value(ZERO)) + r.amount
                )
            return entry
    except IntegrityError as error:
        # Another transaction inserted the same key between our check and insert (possible
        # only where the order lock is not held, e.g. a key reused across orders).
        return _replay_raced(refund, error)


def _replay_raced(refund: _NewRefund, error: IntegrityError) -> RefundEntry:
    """After `error` on the write: the entry another writer stored under the key, replayed; when
    there is none, the error was something else and is raised."""
    existing = RefundEntry.objects.filter(idempotency_key=refund.idempotency_key).first()
    if existing is None:
        raise error
    return _replay(existing, refund.request_hash)


def _first_status(*, source: str, destination, destination_kind: str) -> tuple[str, str]:
    """(gateway, status) of a new entry; see `ledger_refund_issue`."""
    if destination_kind == "gift_card" and destination is not None and destination.kind == PaymentMethod.Kind.GIFT_CARD:
        return RefundEntry.Gateway.STORE_CREDIT, RefundStatus.SUCCEEDED
    if source == RefundEntry.Source.APPROVAL and settings.PAYMENT_GATEWAY == "stripe":
        return RefundEntry.Gateway.STRIPE, RefundStatus.PENDING
    return RefundEntry.Gateway.MANUAL, RefundStatus.SUCCEEDED


def _replay(existing: RefundEntry, request_hash: str) -> RefundEntry:
    if existing.request_hash != request_hash:
        raise IdempotencyConflict(
            f"Idempotency key {existing.idempotency_key} was already used for refund #{existing.pk} "
            "with different arguments.",
            details={"refund_id": existing.pk},
        )
    return existing


def _refusal(
    code: str,
    *,
    amount: Decimal,
    currency: str,
    external_id: str = "",
    order_currency: str = "",
    total: Decimal | None = None,
    refundable: Decimal | None = None,
    unmatched: list[str] = (),
    items_value: Decimal | None = None,
) -> RefundRefused:
    """Each refusal's one wording, for both implementations."""
    if code == "refund_not_positive":
        return RefundRefused(f"A refund must be positive, got {amount}.", code=code)
    if code == "currency_mismatch":
        return RefundRefused(f"Refund currency {currency} differs from order currency {order_currency}.", code=code)
    if code == "foreign_destination":
        return RefundRefused("The refund destination belongs to another customer.", code=code)
    if code == "refund_exceeds_refundable":
        return RefundRefused(
            f"Refund of {amount} {currency} exceeds what is still refundable on {external_id} "
            f"({refundable} of {total}).",
            code=code,
            details={"refundable": str(refundable)},
        )
    if code == "item_not_refundable":
        return RefundRefused(
            f"Items {', '.join(unmatched)} are not on {external_id} or were already refunded.", code=code
        )
    if code == "refund_exceeds_items":
        return RefundRefused(
            f"Refund of {amount} {currency} exceeds the price of the items ({items_value}).", code=code
        )
    raise ValueError(f"unknown refusal {code!r}")


def _check_refund(
    order: Order, amount: Decimal, currency: str, destination, item_ids
) -> dict[int, tuple[int, Decimal]]:
    """Refuse what the ledger must never hold. Returns the order lines an item refund covers."""
    if amount <= 0:
        raise _refusal("refund_not_positive", amount=amount, currency=currency)
    if currency != order.currency:
        raise _refusal("currency_mismatch", amount=amount, currency=currency, order_currency=order.currency)
    if destination is not None and destination.customer_id != order.customer_id:
        raise _refusal("foreign_destination", amount=amount, currency=currency)
    position = order_refund_position(order)
    if amount > position.refundable:
        raise _refusal(
            "refund_exceeds_refundable",
            amount=amount,
            currency=currency,
            external_id=order.external_id,
            total=position.total,
            refundable=position.refundable,
        )
    if not item_ids:
        return {}
    match = position.items_match(item_ids)
    if match.unmatched:
        raise _refusal(
            "item_not_refundable",
            amount=amount,
            currency=currency,
            external_id=order.external_id,
            unmatched=match.unmatched,
        )
    if amount > match.value:
        raise _refusal("refund_exceeds_items", amount=amount, currency=currency, items_value=match.value)
    # The units each order line gives to this refund, as matched above.
    items = {item.line_no: item for item in order.items.all()}
    return {items[line_no].pk: (units, items[line_no].price * units) for line_no, units in match.units.items()}


def ledger_refund_correct(*, entry: RefundEntry, new_amount, reason: str, corrected_by=None) -> RefundRevision:
    """Correct a refund's amount by appending a revision; the old amount stays in the ledger."""
    new_amount = money_parse(new_amount, field="new_amount")  # refuses a negative amount
    if not reason.strip():
        raise InvalidInput("A correction needs a reason.", code="reason_required")
    with transaction.atomic():
        order = Order.objects.select_for_update().get(pk=entry.order_id)
        status = RefundEntry.objects.filter(pk=entry.pk).values_list("status", flat=True).get()
        if status not in COUNTING_STATUSES:
            raise RefundRefused(
                f"Refund #{entry.pk} is {status}: there is nothing to correct.", code="entry_not_counting"
            )
        money_check_currency(amount=new_amount, currency=order.currency, field="new_amount")
        position = order_refund_position(order)
        last = entry.revisions.order_by("-id").first()
        old_amount = last.new_amount if last else entry.amount
        if position.refunded_total - old_amount + new_amount > order.total:
            raise RefundRefused(
                f"Correcting refund #{entry.pk} to {new_amount} would refund more than the order total {order.total}.",
                code="refund_exceeds_refundable",
            )
        return RefundRevision.objects.create(
            entry=entry, old_amount=old_amount, new_amount=new_amount, reason=reason, created_by=corrected_by
        )


def ledger_refund_record_outcome(
    *,
    entry_id: int,
    status: str,
    provider_ref: str = "",
    reason: str = "",
    source: str = RefundEntryEvent.Source.GATEWAY,
    event_ref: str = "",
    log_change: bool = True,
) -> RefundEntry:
    """Record what the provider says about a refund: append a status event, then move the
    entry's status by compare-and-set. Safe to call any number of times, in any order:

    - the same status again (a replay, a duplicate webhook) changes nothing; a pending entry
      learning its provider_ref appends a pending → pending event that sets it;
    - a move the ledger does not allow (succeeded → pending: an older event arriving late) is
      ignored and logged; failed and canceled are final;
    - a different provider_ref than the one already recorded raises EntryStatusConflict.

    A real change sends `refund_entry_status_changed` inside the transaction, so a receiver
    (the ticket going to `payment_failed`) commits with it, and logs one `payout.status_changed`
    line on the money log (ERROR for failed/canceled), unless `log_change` is False: the payout
    logs its own `payout.result` line. Returns the entry as it now is.
    """
    status = RefundStatus(status)
    with transaction.atomic():
        # Lock order: the order row first (as ledger_refund_issue), then the entry.
        order_id = RefundEntry.objects.filter(pk=entry_id).values_list("order_id", flat=True).get()
        order_ref = Order.objects.select_for_update().filter(pk=order_id).values_list("external_id", flat=True).get()
        entry = RefundEntry.objects.get(pk=entry_id)
        if provider_ref and entry.provider_ref and provider_ref != entry.provider_ref:
            raise EntryStatusConflict(
                f"Refund #{entry.pk} is {entry.provider_ref} at the provider, not {provider_ref}.",
                details={"refund_id": entry.pk, "provider_ref": entry.provider_ref},
            )
        learns_ref = bool(provider_ref) and not entry.provider_ref
        if status == entry.status and not learns_ref:
            return entry
        if status != entry.status and status not in STATUS_TRANSITIONS[RefundStatus(entry.status)]:
            logger.info(
                "refund #%s stays %s: %s from %s is not a move the ledger makes", entry.pk, entry.status, status, source
            )
            return entry
        from_status = entry.status
        new_ref = provider_ref or entry.provider_ref
        RefundEntryEvent.objects.create(
            entry=entry,
            from_status=from_status,
            to_status=status,
            provider_ref=new_ref,
            reason=reason,
            source=source,
            event_ref=event_ref,
        )
        now = timezone.now()
        updated = RefundEntry.objects.all()._status_compare_and_set(
            pk=entry.pk, from_status=from_status, status=status, provider_ref=new_ref, status_changed_at=now
        )
        if updated != 1:  # unreachable while every writer holds the order lock; refuse rather than guess
            raise EntryStatusConflict(f"Refund #{entry.pk} changed while its outcome was recorded.")
        entry.refresh_from_db()
        if from_status != status:
            # The line first, then what the layers above do about it (their lines, their tasks).
            if log_change:
                refund_entry_log(
                    entry,
                    event="payout.status_changed",
                    order_ref=order_ref,
                    reason=reason,
                    from_status=from_status,
                    source=source,
                    event_ref=event_ref,
                )
            refund_entry_status_changed.send(
                sender=RefundEntry, entry=entry, from_status=from_status, to_status=status, reason=reason
            )
        return entry


# What the provider refusing or losing a refund leaves: money that did not move (ERROR).
REFUSED_STATUSES = (RefundStatus.FAILED, RefundStatus.CANCELED)


def refund_entry_log(
    entry: RefundEntry, *, event: str, order_ref: str, reason: str = "", level: int | None = None, **fields
) -> None:
    """One line on the money log about a payout (docs/operations.md, "Logs"): INFO, or ERROR with
    the provider's reason when the refund failed or was canceled (or `level`). The ticket and
    trace come from the bound context (ledger.telemetry.bind): the ledger does not know tickets."""
    refused = entry.status in REFUSED_STATUSES
    line = {
        "event": event,
        "tenant": entry.tenant_id,
        "order": order_ref,
        "ledger_entry": entry.pk,
        "amount": str(entry.amount),
        "currency": entry.currency,
        "gateway": entry.gateway,
        "provider_ref": entry.provider_ref,
        "status": entry.status,
        "approval": entry.approval_ref,
        **{key: value for key, value in fields.items() if value not in (None, "")},
    }
    if reason:
        line["reason"] = reason
    money_log.log(
        level if level is not None else logging.ERROR if refused else logging.INFO,
        "refund #%s of %s %s on %s at %s: %s%s",
        entry.pk,
        entry.amount,
        entry.currency,
        order_ref,
        entry.gateway,
        entry.status,
        f" ({reason})" if reason else "",
        extra=line,
    )


def ledger_refund_record_external(
    *,
    order: Order,
    amount: Decimal,
    currency: str,
    gateway: str,
    provider_ref: str,
    reason: str = "",
    event_ref: str = "",
) -> RefundEntry | None:
    """A refund made at the provider outside the product (by hand in the dashboard) is a fact:
    the money left. Record it as an `external` entry that counts and is flagged for review.
    Idempotent on the provider's refund id. Returns None when the ledger cannot hold it (above
    what is refundable while other refunds are pending, or not representable): the caller keeps
    a reconciliation finding instead."""
    key = f"{gateway}:{provider_ref}"
    with transaction.atomic():
        locked = Order.objects.select_for_update().get(pk=order.pk)
        existing = RefundEntry.objects.filter(idempotency_key=key).first()
        if existing is not None:
            return existing
        try:
            amount = money_parse(amount, currency=currency)
            _check_refund(locked, amount, currency, None, [])
        except InvalidInput as exc:
            logger.warning("external refund %s on order %s not recorded: %s", provider_ref, locked.pk, exc.message)
            return None
        entry = RefundEntry.objects.create(
            tenant_id=locked.tenant_id,
            order=locked,
            amount=amount,
            currency=currency,
            destination=None,
            destination_kind="original",
            idempotency_key=key,
            request_hash=canonical_hash({"external": key, "amount": str(amount), "currency": currency}),
            source=RefundEntry.Source.EXTERNAL,
            reason=reason or "Refund made at the provider outside the product.",
            gateway=gateway,
            status=RefundStatus.EXTERNAL,
            status_changed_at=timezone.now(),
            provider_ref=provider_ref,
            needs_review=True,
        )
        RefundEntryEvent.objects.create(
            entry=entry,
            from_status="",
            to_status=RefundStatus.EXTERNAL,
            provider_ref=provider_ref,
            reason=entry.reason,
            source=RefundEntryEvent.Source.WEBHOOK if event_ref else RefundEntryEvent.Source.RECONCILIATION,
            event_ref=event_ref,
        )
        # Money this product did not decide left the shop: WARNING, finance reviews it.
        refund_entry_log(
            entry,
            event="payout.external",
            order_ref=locked.external_id,
            reason=entry.reason,
            level=logging.WARNING,
            event_ref=event_ref,
        )
        return entry
