"""Publishing a refund policy: the one way a tenant's current policy changes.

A draft is published, the current version is retired and the new one supersedes it, in one
transaction with the tenant's current policy locked (approvals.locks), so two publications never
leave a tenant with two current policies. Used by the admin, the demo and the evals.
"""

import json
import re
from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from ledger.exceptions import InvalidInput
from ledger.models import Tenant
from ledger.money import money_parse
from ledger.services import canonical_hash

from ..locks import policy_current_lock
from ..models import PolicyPublication, PolicyReplay, RefundPolicy


def refund_policy_publish(*, tenant: Tenant, policy: RefundPolicy, now: datetime | None = None) -> RefundPolicy:
    """Publish the draft `policy` as `tenant`'s current policy and retire the one it replaces.
    Pending approval requests made under the old version are re-checked before approval."""
    if policy.tenant_id != tenant.pk:
        raise InvalidInput(f"{policy.version} is not a policy of {tenant}.", code="foreign_policy")
    if policy.status != RefundPolicy.Status.DRAFT:
        raise InvalidInput(f"{policy.version} is {policy.status}; only drafts are published.", code="not_a_draft")
    now = now or timezone.now()
    with transaction.atomic():
        current = policy_current_lock(tenant=tenant)
        policy.status, policy.published_at = RefundPolicy.Status.PUBLISHED, now
        if current is not None and not hasattr(current, "superseded_by"):
            policy.supersedes = current
        policy.save()
        if current is not None:
            current.status, current.retired_at = RefundPolicy.Status.RETIRED, now
            current.save()
    return policy


def refund_policy_retire(*, tenant: Tenant, now: datetime | None = None) -> int:
    """Retire every published policy of `tenant`, leaving it with no current policy (every
    refund then escalates). Returns how many were retired."""
    now = now or timezone.now()
    retired = 0
    with transaction.atomic():
        published = (
            RefundPolicy.objects.select_for_update().for_tenant(tenant).filter(status=RefundPolicy.Status.PUBLISHED)
        )
        for policy in published:
            policy.status, policy.retired_at = RefundPolicy.Status.RETIRED, now
            policy.save()
            retired += 1
    return retired


# The rules a draft may set (`policy_draft --set FIELD=VALUE`, the admin's draft form), and how
# each is read from text.
STATUS_CHOICES = {"pending", "processed", "delivered", "cancelled"}
DESTINATION_CHOICES = {"original", "gift_card"}
WAIVABLE_CHOICES = {"window", "order_status"}
DRAFT_FIELDS = (
    "window_days",
    "full_refund_statuses",
    "item_refund_statuses",
    "full_refund_destinations",
    "item_refund_destinations",
    "two_approver_threshold",
    "two_approver_threshold_currency",
    "threshold_rates",
    "approvals_above_threshold",
    "waivable_rules",
    "risk_rules",
    "text",
)
# What the fingerprint covers: the rules and the version's name and text (not its lifecycle).
FINGERPRINT_FIELDS = ("version", *DRAFT_FIELDS)
MAX_VERSION_LENGTH = 100


def refund_policy_fingerprint(policy: RefundPolicy) -> str:
    """SHA-256 of a policy's rules: a replay is of exactly this draft only while it matches."""
    return canonical_hash({name: getattr(policy, name) for name in FINGERPRINT_FIELDS})


def _choices(field: str, raw: str, allowed: set[str]) -> list[str]:
    values = [part.strip() for part in raw.split(",") if part.strip()]
    unknown = [value for value in values if value not in allowed]
    if unknown:
        raise InvalidInput(
            f"{field}: {', '.join(unknown)} not one of {', '.join(sorted(allowed))}.", code="bad_policy_field"
        )
    return list(dict.fromkeys(values))


def _count(field: str, raw: str, minimum: int) -> int:
    if not raw.isascii() or not raw.isdigit() or int(raw) < minimum or int(raw) > 100_000:
        raise InvalidInput(f"{field}: {raw!r} is not a whole number of at least {minimum}.", code="bad_policy_field")
    return int(raw)


def refund_policy_field_parse(*, field: str, raw: str):
    """One `--set FIELD=VALUE` as the value the draft stores. Lists are comma-separated; an empty
    window or threshold means none. InvalidInput (naming the field) for anything else."""
    raw = raw.strip()
    if field == "window_days":
        return None if raw in ("", "none") else _count(field, raw, 0)
    if field in ("full_refund_statuses", "item_refund_statuses"):
        return _choices(field, raw, STATUS_CHOICES)
    if field in ("full_refund_destinations", "item_refund_destinations"):
        return _choices(field, raw, DESTINATION_CHOICES)
    if field == "waivable_rules":
        return _choices(field, raw, WAIVABLE_CHOICES)
    if field == "two_approver_threshold":
        if raw in ("", "none"):
            return None
        amount = money_parse(raw, field=field)
        if amount <= 0:
            raise InvalidInput(f"{field}: must be positive.", code="bad_policy_field")
        return amount
    if field == "approvals_above_threshold":
        return _count(field, raw, 1)
    if field == "two_approver_threshold_currency":
        if not re.fullmatch(r"[A-Z]{3}", raw):
            raise InvalidInput(f"{field}: {raw!r} is not an ISO currency code (e.g. USD).", code="bad_policy_field")
        return raw
    if field == "threshold_rates":
        # CODE:RATE pairs, comma-separated (EUR:1.08,GBP:1.27); checked with the model's own rules.
        rates = {}
        for pair in filter(None, (part.strip() for part in raw.split(","))):
            code, _, rate = pair.partition(":")
            rates[code.strip()] = rate.strip()
        return rates
    if field == "risk_rules":
        # A JSON object (approvals.risk_rules); its shape is checked with the model's own rules.
        try:
            return json.loads(raw)
        except ValueError:
            raise InvalidInput(f"{field}: not JSON.", code="bad_policy_field") from None
    if field == "text":
        if "\x00" in raw:
            raise InvalidInput("text: contains a NUL character.", code="bad_policy_field")
        if not raw:
            raise InvalidInput("text: a policy needs the text drafts cite.", code="bad_policy_field")
        return raw
    raise InvalidInput(f"Unknown policy field {field!r}; one of {', '.join(DRAFT_FIELDS)}.", code="bad_policy_field")


def refund_policy_draft(
    *, tenant: Tenant, name: str, source_version: str | None = None, changes: dict | None = None
) -> RefundPolicy:
    """A draft policy `name` copied from `source_version` (default: the tenant's current one)
    with `changes` (field -> value, already parsed) applied. Not current until published.
    InvalidInput, with nothing written, for a taken or bad name, an unknown source or field."""
    name = (name or "").strip()
    if not name or len(name) > MAX_VERSION_LENGTH or not name.isprintable():
        raise InvalidInput(f"A policy version is 1 to {MAX_VERSION_LENGTH} printable characters.", code="bad_name")
    if source_version:
        source = RefundPolicy.objects.for_tenant(tenant).filter(version=source_version).first()
        if source is None:
            raise InvalidInput(f"{tenant.slug} has no policy {source_version}.", code="unknown_policy")
    else:
        source = RefundPolicy.objects.current_for(tenant)
        if source is None:
            raise InvalidInput(
                f"{tenant.slug} has no current policy to copy; name one with --from.", code="unknown_policy"
            )
    changes = dict(changes or {})
    unknown = set(changes) - set(DRAFT_FIELDS)
    if unknown:
        raise InvalidInput(f"Unknown policy fields: {', '.join(sorted(unknown))}.", code="bad_policy_field")
    fields = {field: getattr(source, field) for field in DRAFT_FIELDS} | changes
    draft = RefundPolicy(tenant=tenant, version=name, status=RefundPolicy.Status.DRAFT, **fields)
    try:
        draft.clean()  # the model's own rules (the threshold's currency, recorded rates)
    except ValidationError as error:
        problems = "; ".join(f"{field}: {' '.join(texts)}" for field, texts in error.message_dict.items())
        raise InvalidInput(problems, code="bad_policy_field") from None
    try:
        with transaction.atomic():
            draft.save()
            return draft
    except IntegrityError:
        raise InvalidInput(f"{tenant.slug} already has a policy {name}.", code="version_taken") from None


def policy_replay_latest(*, draft: RefundPolicy) -> PolicyReplay | None:
    """The newest finished replay of exactly `draft` as it is now (same fingerprint), or None."""
    return (
        PolicyReplay.objects.filter(
            draft=draft, status=PolicyReplay.Status.DONE, draft_fingerprint=refund_policy_fingerprint(draft)
        )
        .order_by("-created_at", "-id")
        .first()
    )


def policy_draft_publish(
    *, tenant: Tenant, policy: RefundPolicy, without_replay_reason: str = "", user=None, now: datetime | None = None
) -> PolicyPublication:
    """Publish a draft only after a replay of exactly that draft (docs/replay.md): the newest
    finished replay whose fingerprint is the draft's now. Without one, only with a written
    reason, which is kept. InvalidInput (code replay_missing), nothing changed, otherwise."""
    without_replay_reason = (without_replay_reason or "").strip()
    if policy.tenant_id != tenant.pk:
        raise InvalidInput(f"{policy.version} is not a policy of {tenant}.", code="foreign_policy")
    with transaction.atomic():
        # The draft's row locked: an edit saved meanwhile cannot slip between the check and the publish.
        policy = RefundPolicy.objects.select_for_update().get(pk=policy.pk)
        replay = policy_replay_latest(draft=policy)
        if replay is None and not without_replay_reason:
            changed = PolicyReplay.objects.filter(draft=policy, status=PolicyReplay.Status.DONE).exists()
            raise InvalidInput(
                f"{policy.version} has no replay of exactly this draft"
                + (" (it changed since its last replay)" if changed else "")
                + ": replay it first, or publish without a replay with a written reason.",
                code="replay_missing",
            )
        refund_policy_publish(tenant=tenant, policy=policy, now=now)
        return PolicyPublication.objects.create(
            tenant=tenant,
            policy=policy,
            replay=replay,
            without_replay_reason="" if replay is not None else without_replay_reason,
            published_by=user,
            published_at=policy.published_at,
        )
