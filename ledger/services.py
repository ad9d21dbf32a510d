"""Writes to the ledger. `ledger_refund_issue` is the only function in the product that moves money."""

import hashlib
import json
import logging
from decimal import Decimal

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from .exceptions import EntryStatusConflict, IdempotencyConflict, InvalidInput, NotFound, RefundRefused
from .locks import order_lock
from .models import (
    COUNTING_STATUSES,
    STATUS_TRANSITIONS,
    Order,
    Payment,
    PaymentMethod,
    RefundEntry,
    RefundEntryEvent,
    RefundEntryItem,
    RefundRevision,
    RefundStatus,
)
from .money import ZERO, money_check_currency, money_parse
from .selectors import order_payments_returnable, order_refund_position
from .signals import refund_entry_status_changed
from .telemetry import money_log, traced
from .text import CARD_NUMBER

# A payment Shopify took: its payment_ref is the transaction's gid.
SHOPIFY_REF = "gid://shopify/OrderTransaction/"

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
    payment: Payment | None = None,
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
    - an approved refund of a payment Shopify took (its `payment_ref` a Shopify transaction gid),
      a gift card leg included: `pending` with gateway `shopify`, paid by `refundCreate`
      (ledger/gateways/shopify.py);
    - to a gift card: store credit, `succeeded`, the card's balance grown in this transaction
      (except for imports: the shop's balance already holds that credit);
    - an approved refund under the `manual` gateway: `pending` until a person records that they
      paid it by hand (`ledger_refund_record_paid`, with the payout's reference);
    - anything else (imports, operator entries): `succeeded`, paid by hand.

    `payment`: the order's payment this refund gives back (one tender leg, docs/payments.md "Split
    tender"). It must be the order's, paid with `destination` (a payment with no recorded method:
    none), and it must still be able to return the amount, checked under the order lock
    (`refund_exceeds_payment`): a charge never gives back more than it took, whatever else the
    order could still refund.

    Refusals (RefundRefused) and replays write nothing. Inside a caller's transaction the write
    is a savepoint, so a refusal leaves that transaction usable. The database backs every rule
    up: the key is unique, and the triggers of migrations 0002/0004 re-check the cap at commit.
    """
    amount = money_parse(amount, currency=currency)
    item_ids = list(item_ids or [])
    if not idempotency_key:
        raise InvalidInput("An idempotency key is required.", code="idempotency_key_required")
    source, approval_ref = str(source), str(approval_ref)
    request_hash = canonical_hash(
        {
            "order": order.pk,
            "amount": str(amount),
            "currency": currency,
            "destination": destination.pk if destination else None,
            "destination_kind": destination_kind,
            "items": sorted(item_ids),
            "source": source,
            "approval": approval_ref,
            # Only when named, so the hashes of entries written before legs were recorded still match.
            **({"payment": payment.pk} if payment is not None else {}),
        }
    )
    gateway, status = _first_status(
        source=source, destination=destination, destination_kind=destination_kind, payment=payment
    )
    try:
        with transaction.atomic():
            # Lock order: the order row first, always (see docs/ledger.md).
            locked = order_lock(order_id=order.pk)
            existing = RefundEntry.objects.filter(idempotency_key=idempotency_key).first()
            if existing is not None:
                return _replay(existing, request_hash)
            lines = _check_refund(locked, amount, currency, destination, item_ids)
            if payment is not None:
                _check_payment_leg(locked, amount, currency, destination, payment)
            entry = RefundEntry.objects.create(
                tenant_id=locked.tenant_id,
                order=locked,
                amount=amount,
                currency=currency,
                destination=destination,
                destination_kind=destination_kind,
                payment=payment,
                idempotency_key=idempotency_key,
                request_hash=request_hash,
                source=source,
                approval_ref=approval_ref,
                reason=reason,
                created_by=created_by,
                gateway=gateway,
                status=status,
                status_changed_at=timezone.now(),
            )
            RefundEntryEvent.objects.create(
                entry=entry, from_status="", to_status=status, source=RefundEntryEvent.Source.ISSUE
            )
            RefundEntryItem.objects.bulk_create(
                RefundEntryItem(entry=entry, order_item_id=item_pk, quantity=quantity, amount=value)
                for item_pk, (quantity, value) in lines.items()
            )
            # Store credit grows the gift card's balance, except an import's (the shop's balance
            # already holds that credit). Lock order: the order row is held; the gift card second.
            if gateway == RefundEntry.Gateway.STORE_CREDIT and source != RefundEntry.Source.IMPORT:
                _store_credit_move(method_id=destination.pk, amount=amount)
            return entry
    except IntegrityError as error:
        # Another transaction inserted the same key between our check and insert: possible only
        # where the order lock does not serialise the two (the key reused on another order).
        return _replay_raced(idempotency_key, request_hash, error)


def _store_credit_move(*, method_id: int, amount: Decimal) -> None:
    """Move a gift card's kept balance by `amount`, in the ledger's transaction that issued (or
    corrected) the store credit, so the kept balance stays the opening balance plus the ledger's
    movements (`ledger.selectors.gift_card_balance`)."""
    PaymentMethod.objects.filter(pk=method_id).update(balance=Coalesce(F("balance"), Value(ZERO)) + amount)


def _replay_raced(idempotency_key: str, request_hash: str, error: IntegrityError) -> RefundEntry:
    """After `error` on the write: the entry another writer stored under the key, replayed; when
    there is none, the error was something else and is raised."""
    existing = RefundEntry.objects.filter(idempotency_key=idempotency_key).first()
    if existing is None:
        raise error
    return _replay(existing, request_hash)


def _first_status(*, source: str, destination, destination_kind: str, payment=None) -> tuple[str, str]:
    """(gateway, status) of a new entry; see `ledger_refund_issue`."""
    # A payment Shopify took is refunded by Shopify, a gift card leg too (on the gift card
    # transaction): the order, its restock and the shop's reports must hear of it.
    if source == RefundEntry.Source.APPROVAL and payment is not None and payment.payment_ref.startswith(SHOPIFY_REF):
        return RefundEntry.Gateway.SHOPIFY, RefundStatus.PENDING
    # A gift card takes store credit, whether it is where the customer asked for the refund or
    # the tender it paid with (a split-tender or gift-card-only order): no provider can pay it.
    if destination is not None and destination.kind == PaymentMethod.Kind.GIFT_CARD:
        return RefundEntry.Gateway.STORE_CREDIT, RefundStatus.SUCCEEDED
    if source == RefundEntry.Source.APPROVAL and settings.PAYMENT_GATEWAY == "stripe":
        return RefundEntry.Gateway.STRIPE, RefundStatus.PENDING
    if source == RefundEntry.Source.APPROVAL:
        # Finance pays by hand: the money is not out until a person records that they paid
        # (`ledger_refund_record_paid`); until then it counts as pending.
        return RefundEntry.Gateway.MANUAL, RefundStatus.PENDING
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
    """Each refusal's one wording."""
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
    if code == "items_exceed_quantity":
        return RefundRefused(
            f"Items {', '.join(unmatched)} are named more times than {external_id} has units of them.", code=code
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
    if match.over_quantity and not match.not_on_order:
        raise _refusal(
            "items_exceed_quantity",
            amount=amount,
            currency=currency,
            external_id=order.external_id,
            unmatched=list(match.over_quantity),
        )
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


def _check_payment_leg(order: Order, amount: Decimal, currency: str, destination, payment: Payment) -> None:
    """Refuse a leg on a payment that is not the order's, not made with the leg's method, or that
    can no longer return the amount (read under the caller's order lock, so two legs on one
    payment, from one approval or two, never together exceed what it took)."""
    if payment.order_id != order.pk or payment.payment_method_id != (destination.pk if destination else None):
        raise RefundRefused(
            f"Payment #{payment.pk} is not a payment of {order.external_id} made with the refund's method.",
            code="payment_not_order",
        )
    returnable = next(
        (leg.returnable for leg in order_payments_returnable(order) if leg.payment_id == payment.pk), ZERO
    )
    if amount > returnable:
        raise RefundRefused(
            f"Refund of {amount} {currency} exceeds what payment #{payment.pk} of {order.external_id} can still "
            f"return ({returnable} of {payment.amount}).",
            code="refund_exceeds_payment",
            details={"payment": payment.pk, "returnable": str(returnable)},
        )


def ledger_refund_correct(*, entry: RefundEntry, new_amount, reason: str, corrected_by=None) -> RefundRevision:
    """Correct a refund's amount by appending a revision; the old amount stays in the ledger."""
    new_amount = money_parse(new_amount, field="new_amount")  # refuses a negative amount
    if not reason.strip():
        raise InvalidInput("A correction needs a reason.", code="reason_required")
    with transaction.atomic():
        order = order_lock(order_id=entry.order_id)
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
        revision = RefundRevision.objects.create(
            entry=entry, old_amount=old_amount, new_amount=new_amount, reason=reason, created_by=corrected_by
        )
        # Store credit the ledger issued: the card's kept balance follows the corrected amount.
        if entry.gateway == RefundEntry.Gateway.STORE_CREDIT and entry.source != RefundEntry.Source.IMPORT:
            _store_credit_move(method_id=entry.destination_id, amount=new_amount - old_amount)
        return revision


def ledger_refund_record_outcome(
    *,
    entry_id: int,
    status: str,
    provider_ref: str = "",
    reason: str = "",
    source: str = RefundEntryEvent.Source.GATEWAY,
    event_ref: str = "",
    log_change: bool = True,
    recorded_by=None,
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
        order_ref = order_lock(order_id=order_id).external_id
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
            recorded_by=recorded_by,
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
    payment: Payment | None = None,
) -> RefundEntry | None:
    """A refund made at the provider outside the product (by hand in the dashboard) is a fact:
    the money left. Record it as an `external` entry that counts and is flagged for review.
    `payment`: the order's payment the provider refunded (its charge), so it counts against that
    payment and its method, not the order's first (a later leg is never sent to a charge that
    has nothing left). Idempotent on the provider's refund id. Returns None when the ledger cannot
    hold it (above what is refundable while other refunds are pending, or not representable): the
    caller keeps a reconciliation finding instead."""
    key = f"{gateway}:{provider_ref}"
    with transaction.atomic():
        locked = order_lock(order_id=order.pk)
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
            destination=payment.payment_method if payment is not None else None,
            destination_kind="original",
            payment=payment,
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


# A payout reference is the bank's or the provider's id of the transfer, never card data: a run
# of 13 to 19 digits (spaces or dashes between them) is refused as a possible card number.
# The OpenAPI document carries the same rules (ledger/schemas.py, RefundPaidIn).
REFERENCE_MAX_LENGTH = 100


def payout_reference_parse(reference) -> str:
    """The reference a person gives for a payout made by hand: printable text of at most 100
    characters that does not look like a card number. Raises InvalidInput otherwise."""
    if not isinstance(reference, str) or not reference.strip():
        raise InvalidInput("The payout's reference is required.", code="reference_required")
    reference = reference.strip()
    if len(reference) > REFERENCE_MAX_LENGTH or not reference.isprintable():
        raise InvalidInput(
            f"The reference must be printable text of at most {REFERENCE_MAX_LENGTH} characters.",
            code="bad_reference",
        )
    if CARD_NUMBER.search(reference):
        raise InvalidInput(
            "The reference looks like a card number; give the transfer's reference, never card data.",
            code="bad_reference",
        )
    return reference


def ledger_refund_record_paid(*, entry_id: int, tenant, reference: str, user) -> RefundEntry:
    """A person records that they paid a `manual` refund by hand: who (`user`), when (now) and
    the payout's reference. The entry moves `pending` → `succeeded` by the same path as a
    provider's answer (its event names the person), so the layers above follow it as they
    follow a provider: the approval is verified and the ticket becomes `refunded`.

    Only an entry of `tenant` (else NotFound) that is waiting for a manual payout (else
    EntryStatusConflict: already recorded, another gateway, failed); checked under the order
    lock, so two people recording at once record one payout."""
    reference = payout_reference_parse(reference)
    with transaction.atomic():
        # Lock order: the order row first (as every ledger write).
        order_id = (
            RefundEntry.objects.filter(pk=entry_id, tenant=tenant).values_list("order_id", flat=True).first()
            if isinstance(entry_id, int)
            else None
        )
        if order_id is None:
            raise NotFound(f"Refund {entry_id} not found.")
        order_lock(order_id=order_id)
        entry = RefundEntry.objects.get(pk=entry_id)
        if entry.gateway == RefundEntry.Gateway.MANUAL and entry.status == RefundStatus.PENDING:
            # A payout's reference names one payout (PostgreSQL holds it unique per gateway, too).
            used = RefundEntry.objects.filter(gateway=RefundEntry.Gateway.MANUAL, provider_ref=reference).first()
            if used is not None:
                raise EntryStatusConflict(
                    f"The reference {reference} already records the payout of refund #{used.pk}.",
                    code="reference_already_used",
                    details={"refund_id": entry.pk},
                )
        if entry.gateway != RefundEntry.Gateway.MANUAL or entry.status != RefundStatus.PENDING:
            raise EntryStatusConflict(
                f"Refund #{entry.pk} is not waiting for a manual payout (it is {entry.status}, "
                f"paid through {entry.gateway}).",
                code="not_awaiting_manual_payout",
                details={"refund_id": entry.pk, "status": entry.status, "gateway": entry.gateway},
            )
        return ledger_refund_record_outcome(
            entry_id=entry.pk,
            status=RefundStatus.SUCCEEDED,
            provider_ref=reference,
            reason=f"Paid by hand; recorded by {user.get_username()}.",
            source=RefundEntryEvent.Source.PERSON,
            recorded_by=user,
        )
