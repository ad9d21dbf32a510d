"""Inbound email: anymail's `inbound` signal, one message at a time, into the inbox service
(docs/inbox.md). anymail's webhook views check the provider's auth and parse its payload into an
AnymailInboundMessage; this reads from it what the product trusts:

- the tenant, from the envelope recipient (Postmark's OriginalRecipient, Mailgun's recipient),
  or only when the provider gave none, from the To header; no tenant's address → nothing stored;
- whether the sender is verified: the provider's own SPF/DKIM verdict headers, every one of them
  `pass`, and the envelope sender (what SPF vouches for) of the From address's domain.
  `Authentication-Results` is never read: anyone can write one into a message;
- the text, the thread headers and the attachments' names and sizes (never their bytes).
"""

import logging

from anymail.signals import inbound
from django.dispatch import receiver
from django.utils.html import strip_tags

from .services import InboundResult, inbound_message_receive, inbox_tenant_for

logger = logging.getLogger(__name__)

# The verdict headers each provider writes on a message it received (its own, above the
# message's): every one must be present and say pass.
PROVIDER_VERDICT_HEADERS = {
    "Postmark": ("Received-SPF",),
    "Mailgun": ("X-Mailgun-Spf", "X-Mailgun-Dkim-Check-Result"),
}


def provider_verdict_passed(*, message, esp_name: str, esp_event=None) -> bool:
    """True only when the provider itself says SPF (and DKIM, where it checks it) passed.

    Each named header must be present and every copy of it must say `pass`: the provider puts
    its own copy above the message's headers, so a copy the sender wrote can only make the
    verdict fail, never pass. A provider whose verdict the product cannot read is never a pass."""
    if esp_name == "Amazon SES":
        receipt = (esp_event or {}).get("receipt") if isinstance(esp_event, dict) else None
        receipt = receipt if isinstance(receipt, dict) else {}
        return all(
            isinstance(receipt.get(name), dict) and str(receipt[name].get("status", "")).upper() == "PASS"
            for name in ("spfVerdict", "dkimVerdict")
        )
    names = PROVIDER_VERDICT_HEADERS.get(esp_name)
    if not names:
        return False
    for name in names:
        values = message.get_all(name) or []
        if not values or any(_verdict(value) != "pass" for value in values):
            return False
    return True


def _verdict(value) -> str:
    # "Pass (sender SPF authorized) identity=mailfrom; ..." → "pass"
    words = str(value).strip().split(None, 1)
    return words[0].rstrip(";:").lower() if words else ""


def _domain(address: str) -> str:
    return address.rpartition("@")[2].strip().lower().rstrip(".>")


def sender_of(message) -> str:
    from_email = message.from_email
    return (getattr(from_email, "addr_spec", "") or "").strip()


def sender_verified(*, message, esp_name: str, esp_event=None) -> bool:
    """The provider's verdict passed, and it was about the From address's domain: SPF vouches
    for the envelope sender, so a pass counts only when the envelope sender and From share a
    domain (a forger's own domain can pass SPF while the From names a customer)."""
    sender = sender_of(message)
    envelope = (message.envelope_sender or "").strip()
    if not sender or not envelope or _domain(envelope) != _domain(sender):
        return False
    return provider_verdict_passed(message=message, esp_name=esp_name, esp_event=esp_event)


def _text_of(message) -> str:
    text = message.text
    if text is None and message.html:
        text = strip_tags(message.html)
    return text or ""


def _attachments_of(message) -> list[dict]:
    parts = list(message.attachments) + [part for part in message.inlines if part.get_filename()]
    listed = []
    for part in parts:
        content = part.get_content_bytes() or b""
        listed.append(
            {"name": part.get_filename() or "", "size": len(content), "content_type": part.get_content_type()}
        )
    return listed


def email_inbound_receive(*, message, esp_name: str, esp_event=None) -> InboundResult | None:
    """File one inbound email for the tenant it was sent to; None when it was sent to no
    tenant's support address (nothing is stored)."""
    if message.envelope_recipient:
        recipients = [message.envelope_recipient]
    else:
        recipients = [getattr(a, "addr_spec", "") for a in message.to]
    tenant = inbox_tenant_for(recipients)
    if tenant is None:
        logger.warning("inbound email (%s) to %s: no tenant has this support address; not stored", esp_name, recipients)
        return None
    return inbound_message_receive(
        tenant=tenant,
        source="email",
        sender=sender_of(message),
        sender_verified=sender_verified(message=message, esp_name=esp_name, esp_event=esp_event),
        subject=message.subject or "",
        text=_text_of(message),
        message_id=message["Message-ID"] or "",
        in_reply_to=message.get_all("In-Reply-To") or (),
        references=message.get_all("References") or (),
        attachments=_attachments_of(message),
    )


@receiver(inbound, dispatch_uid="refundagent.inbox.email_inbound")
def on_inbound_email(sender, event, esp_name, **kwargs):
    email_inbound_receive(message=event.message, esp_name=esp_name, esp_event=event.esp_event)
