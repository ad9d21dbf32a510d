"""Tenancy's services and selectors: whose tenant a caller is, their roles, API tokens, and the
role groups every deployment gets.

Roles are Django groups. Each app declares what each role may do with its own models in its
AppConfig (`role_permissions = {"finance": ["approvals.approve_approvalrequest", ...]}`);
`roles_sync` collects those through the app registry (so the ledger imports no higher app) and
makes the groups match. It runs after every `migrate` (post_migrate) and from
`manage.py setup_roles`.
"""

import hashlib
import secrets
from dataclasses import dataclass, field
from datetime import timedelta

from django.apps import apps
from django.contrib.auth.models import AbstractBaseUser, Group, Permission
from django.contrib.postgres.expressions import ArraySubquery
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, transaction
from django.db.models import OuterRef
from django.utils import timezone

from .exceptions import Conflict, Forbidden
from .models import ApiToken, Membership, Tenant

# The roles the API checks (docs/api.md). `operator` exists too, for the admin only.
ROLES = ("support", "finance")


def tenant_for_user(user: AbstractBaseUser) -> Tenant:
    """The caller's tenant. A user without one may reach nothing."""
    membership = getattr(user, "membership", None) if user.is_authenticated else None
    if membership is None:
        raise Forbidden("This user belongs to no tenant.", code="no_tenant")
    return membership.tenant


def user_roles(user: AbstractBaseUser) -> set[str]:
    # Cached on the instance: one query per request however often roles are asked for (none
    # for a Bearer token's user: api_token_authenticate reads them with the token).
    if not hasattr(user, "_refundagent_roles"):
        user._refundagent_roles = set(user.groups.filter(name__in=ROLES).values_list("name", flat=True))
    return user._refundagent_roles


def user_require_role(user: AbstractBaseUser, *roles: str) -> None:
    if not user_roles(user) & set(roles):
        raise Forbidden(f"This needs the {' or '.join(roles)} role.", code="role_required")


# The one rule of who may do what with tickets, read by the API, the support web UI and the
# Idempotency-Key replay alike (docs/api.md): a page and its endpoint can never disagree.
# Deciding money has its own check, with the maker-checker rule (approval_decider_check).
ROLE_RULES = {
    # Read tickets, their trace, orders and ledgers: customer messages and card digits.
    "tickets.read": ("support", "finance"),
    # File a ticket.
    "tickets.file": ("support",),
    # Take, hand back, escalate, close a ticket; propose a refund on it.
    "tickets.work": ("support", "finance"),
}


def user_require_access(user: AbstractBaseUser, action: str) -> None:
    """Forbidden (`role_required`) unless `user` has a role `ROLE_RULES[action]` allows."""
    user_require_role(user, *ROLE_RULES[action])


def membership_ensure(*, user: AbstractBaseUser, tenant: Tenant) -> Membership:
    """Make `user` a member of `tenant` unless they already are; a user of another tenant is
    refused. Seeding and imports find their staff by username, and a user's roles (groups) count
    in whatever tenant they belong to: granting a role to another tenant's user who happens to
    have the name would give them that role in their own tenant."""
    membership, _ = Membership.objects.select_related("tenant").get_or_create(user=user, defaults={"tenant": tenant})
    if membership.tenant_id != tenant.pk:
        raise Conflict(
            f"User {user.get_username()} already exists in tenant {membership.tenant.slug}, not {tenant.slug}: "
            "rename or remove that user first; nothing was written.",
            code="user_of_another_tenant",
            details={"username": user.get_username(), "tenant": membership.tenant.slug},
        )
    return membership


def api_token_create(*, user) -> str:
    """Create a token for `user` and return it. Only its hash is stored: it is shown once."""
    token = "ra_" + secrets.token_urlsafe(32)
    ApiToken.objects.create(user=user, key_hash=hashlib.sha256(token.encode()).hexdigest(), prefix=token[:10])
    return token


# How fresh a token's last_used_at is kept (the admin shows it to the minute).
TOKEN_LAST_USED_PRECISION = timedelta(minutes=1)


# What authentication reads with a token, built once (every API call clones it, never runs it
# as such): its user, their tenant, and their roles in the same query, since every API call
# asks for them (user_roles) and a query of their own cost a statement per request.
_TOKENS_WITH_USER = ApiToken.objects.select_related("user", "user__membership__tenant").annotate(
    role_names=ArraySubquery(
        Group.objects.filter(user=OuterRef("user_id"), name__in=ROLES).values_list("name", flat=True)
    )
)


def api_token_authenticate(token: str):
    """The active user a token belongs to, or None."""
    if not token:
        return None
    key_hash = hashlib.sha256(token.encode()).hexdigest()
    try:
        # get(), not first(): the hash is unique, so no ORDER BY to build and run.
        api_token = _TOKENS_WITH_USER.get(key_hash=key_hash, revoked_at__isnull=True, user__is_active=True)
    except ApiToken.DoesNotExist:
        return None
    api_token.user._refundagent_roles = set(api_token.role_names)
    now = timezone.now()
    if api_token.last_used_at is None or now - api_token.last_used_at >= TOKEN_LAST_USED_PRECISION:
        # At most one write a minute per token: a client filing many tickets does not pay a
        # committed UPDATE on every request for a date the admin shows to the minute.
        ApiToken.objects.filter(pk=api_token.pk).update(last_used_at=now)
    return api_token.user


def api_tokens_revoke(*, queryset) -> int:
    """Revoke the tokens of `queryset` that are still active; returns how many were revoked."""
    return queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())


@dataclass(frozen=True)
class RoleSynced:
    """What `roles_sync` did to one role's group."""

    role: str
    group: Group
    created: bool
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.created or bool(self.added or self.removed)


def role_permissions_declared() -> dict[str, set[str]]:
    """Every installed app's `role_permissions`, merged by role. An app declares only permissions
    on its own models, so no app names a higher one's."""
    declared: dict[str, set[str]] = {}
    for app_config in apps.get_app_configs():
        for role, perms in getattr(app_config, "role_permissions", {}).items():
            foreign = [p for p in perms if p.partition(".")[0] != app_config.label]
            if foreign:
                raise ImproperlyConfigured(
                    f"{app_config.name} declares {foreign} for role {role!r}: an app declares only its own permissions."
                )
            declared.setdefault(role, set()).update(perms)
    return declared


def roles_sync(*, using: str = DEFAULT_DB_ALIAS) -> dict[str, RoleSynced]:
    """Make one group per declared role with exactly the declared permissions. Idempotent: a
    second run changes nothing. The declaration is the source of truth, so a permission added to
    a role's group by hand is removed again (give people extra rights through another group)."""
    declared = role_permissions_declared()
    labels = {perm.partition(".")[0] for perms in declared.values() for perm in perms}
    known = {
        f"{p.content_type.app_label}.{p.codename}": p
        for p in Permission.objects.using(using)
        .select_related("content_type")
        .filter(content_type__app_label__in=labels)
    }
    missing = sorted(set().union(*declared.values()) - known.keys()) if declared else []
    if missing:
        raise ImproperlyConfigured(f"Roles name permissions that do not exist: {missing}. Run `manage.py migrate`.")
    synced = {}
    with transaction.atomic(using=using):
        for role in sorted(declared):
            group, created = Group.objects.using(using).get_or_create(name=role)
            have = {
                f"{p.content_type.app_label}.{p.codename}": p for p in group.permissions.select_related("content_type")
            }
            added, removed = sorted(declared[role] - have.keys()), sorted(have.keys() - declared[role])
            if added:
                group.permissions.add(*(known[p] for p in added))
            if removed:
                group.permissions.remove(*(have[p] for p in removed))
            synced[role] = RoleSynced(role=role, group=group, created=created, added=added, removed=removed)
    return synced


def roles_sync_after_migrate(sender, *, using=DEFAULT_DB_ALIAS, verbosity=1, **kwargs) -> None:
    """post_migrate receiver: every deployment gets the roles after `migrate` (and tests after a
    flush). post_migrate is sent once per app, after that app's permissions were created; only
    after the last app's are they all there, so that is when the roles are synced."""
    migrated = kwargs.get("apps") or apps
    try:
        migrated.get_model("auth", "Group")  # is auth installed and migrated on this database?
    except LookupError:
        return
    with_models = [a for a in apps.get_app_configs() if a.models_module is not None]
    if sender.label != with_models[-1].label:
        return
    for synced in roles_sync(using=using).values():
        if synced.changed and verbosity >= 2:
            print(f"Synced role {synced.role}: +{len(synced.added)} -{len(synced.removed)} permissions")
