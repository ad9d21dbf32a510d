"""The second factor of everyone who approves money (django-otp TOTP; docs/configuration.md
"Sign-in"). A stolen password alone must not decide a refund: with APPROVER_SECOND_FACTOR on
(the default whenever DEBUG is off), a user who can decide must have a confirmed TOTP device and
have entered its code in this session before the admin's decision views (or the API, on a
session) let them decide."""

from django.conf import settings
from django_otp import devices_for_user
from django_otp import login as otp_login
from django_otp.plugins.otp_totp.models import TOTPDevice

from ledger.exceptions import Forbidden

from .services.decisions import user_can_decide

NOT_NEEDED, VERIFIED, UNVERIFIED, NO_DEVICE = "not_needed", "verified", "unverified", "no_device"


def second_factor_state(*, user) -> str:
    """NOT_NEEDED (the switch is off, or the user decides nothing), VERIFIED (a device confirmed
    in this session), UNVERIFIED (a confirmed device, its code not yet entered) or NO_DEVICE."""
    if not settings.APPROVER_SECOND_FACTOR or not user_can_decide(user):
        return NOT_NEEDED
    # OTPMiddleware gives a session's user is_verified(); a user loaded any other way is not.
    is_verified = getattr(user, "is_verified", None)
    if is_verified is not None and is_verified():
        return VERIFIED
    return UNVERIFIED if any(devices_for_user(user, confirmed=True)) else NO_DEVICE


def second_factor_check(*, user) -> None:
    """Forbidden unless `user` may decide on the strength of this session's second factor."""
    state = second_factor_state(user=user)
    if state == NO_DEVICE:
        raise Forbidden(
            "Deciding refunds needs a confirmed second factor (a TOTP device); ask an administrator to "
            "create one (manage.py otp_device_create).",
            code="second_factor_device_missing",
        )
    if state == UNVERIFIED:
        raise Forbidden(
            "Deciding refunds needs your second factor: enter your authenticator's code in the admin first.",
            code="second_factor_required",
        )


def second_factor_verify(*, request, device) -> None:
    """Mark this session as verified with `device` (its code was checked by the form)."""
    otp_login(request, device)


def totp_device_create(*, user, name: str = "authenticator") -> TOTPDevice:
    """A confirmed TOTP device for `user`: its otpauth:// URL (`device.config_url`) goes into the
    user's authenticator app. Made by an administrator, never by the user signed in with only a
    password (which is what a thief has)."""
    return TOTPDevice.objects.create(user=user, name=name, confirmed=True)
