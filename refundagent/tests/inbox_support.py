"""Inbound email as the providers post it: Postmark's inbound JSON and Mailgun's forward() form
(parsed fields with its signature, or the raw MIME on `inbound_mime/`), with the provider's own
verdict headers where each puts them (docs/inbox.md)."""

import base64
import hashlib
import hmac
import json
import time
import uuid
from email.message import EmailMessage

import pytest

WEBHOOK_SECRET = "inbox-hook:s3cret-basic-auth"
MAILGUN_SIGNING_KEY = "mailgun-signing-key-for-tests"
INBOX = "support@shop.example.com"


def basic_auth(secret: str = WEBHOOK_SECRET) -> dict:
    return {"HTTP_AUTHORIZATION": "Basic " + base64.b64encode(secret.encode()).decode()}


@pytest.fixture
def inbox(settings, tenant):
    """`tenant`'s support address, and anymail's webhook credentials configured."""
    from refundagent.inbox.services import inbox_address_set

    settings.ANYMAIL = {"WEBHOOK_SECRET": WEBHOOK_SECRET, "MAILGUN_WEBHOOK_SIGNING_KEY": MAILGUN_SIGNING_KEY}
    return inbox_address_set(tenant=tenant, address=INBOX)


def new_message_id() -> str:
    return f"<{uuid.uuid4().hex}@mail.example.com>"


def postmark_payload(
    *,
    sender="ada@example.com",
    to=INBOX,
    original_recipient=None,
    subject="Broken kettle",
    text="My kettle arrived broken. Please refund it.",
    message_id=None,
    spf="Pass",
    return_path=None,
    extra_headers=(),
    attachments=(),
) -> dict:
    """Postmark's inbound webhook JSON (without "Include raw email"): Return-Path first, then
    Postmark's own headers (its Received-SPF verdict), then the message's."""
    headers = [{"Name": "Return-Path", "Value": f"<{return_path or sender}>"}]
    headers.append({"Name": "Received", "Value": "by p-pm-inboundg02a-aws-useast1a.inbound.postmarkapp.com"})
    if spf is not None:
        headers.append(
            {
                "Name": "Received-SPF",
                "Value": f"{spf} (sender SPF authorized) identity=mailfrom; client-ip=209.85.160.180; "
                f"envelope-from={return_path or sender}; receiver={to}",
            }
        )
    headers += [
        {"Name": "X-Spam-Status", "Value": "No"},
        {"Name": "X-Spam-Score", "Value": "-0.1"},
        {"Name": "MIME-Version", "Value": "1.0"},
        {"Name": "Message-ID", "Value": message_id or new_message_id()},
        *({"Name": name, "Value": value} for name, value in extra_headers),
    ]
    return {
        "FromName": "Ada Lovelace",
        "MessageStream": "inbound",
        "From": sender,
        "FromFull": {"Email": sender, "Name": "Ada Lovelace", "MailboxHash": ""},
        "To": to,
        "ToFull": [{"Email": to, "Name": "Support", "MailboxHash": ""}],
        "Cc": "",
        "CcFull": [],
        "Bcc": "",
        "BccFull": [],
        "OriginalRecipient": original_recipient if original_recipient is not None else to,
        "Subject": subject,
        "MessageID": str(uuid.uuid4()),
        "ReplyTo": "",
        "MailboxHash": "",
        "Date": "Sun, 29 Nov 2026 01:00:00 +0000",
        "TextBody": text,
        "HtmlBody": f"<p>{text}</p>" if text else "",
        "StrippedTextReply": "",
        "Tag": "",
        "Headers": headers,
        "Attachments": [
            {
                "Name": name,
                "Content": base64.b64encode(content).decode(),
                "ContentType": content_type,
                "ContentLength": len(content),
            }
            for name, content, content_type in attachments
        ],
    }


def post_postmark(client, payload, *, auth=None, raw: bytes | None = None):
    body = raw if raw is not None else json.dumps(payload).encode()
    return client.generic(
        "POST",
        "/anymail/postmark/inbound/",
        body,
        content_type="application/json",
        **(basic_auth() if auth is None else auth),
    )


def mailgun_sign(fields: dict, key: str = MAILGUN_SIGNING_KEY) -> dict:
    timestamp, token = str(int(time.time())), uuid.uuid4().hex * 2
    signature = hmac.new(key.encode(), f"{timestamp}{token}".encode(), hashlib.sha256).hexdigest()
    return {**fields, "timestamp": timestamp, "token": token, "signature": signature}


def mailgun_fields(
    *,
    sender="ada@example.com",
    recipient=INBOX,
    subject="Broken kettle",
    text="My kettle arrived broken. Please refund it.",
    message_id=None,
    spf="Pass",
    dkim="Pass",
    envelope_sender=None,
    extra_headers=(),
) -> dict:
    """Mailgun's forward() POST, "fully parsed": its verdict headers first in message-headers,
    and the headers also as fields of their own."""
    headers = [
        ["X-Mailgun-Spf", spf],
        ["X-Mailgun-Dkim-Check-Result", dkim],
        ["X-Mailgun-Sflag", "No"],
        ["X-Mailgun-Sscore", "0.0"],
        ["X-Mailgun-Incoming", "Yes"],
        ["X-Envelope-From", f"<{envelope_sender or sender}>"],
        ["Received", "from mail.example.com by mxa.mailgun.org with ESMTP"],
        ["Mime-Version", "1.0"],
        ["From", f"Ada Lovelace <{sender}>"],
        ["Date", "Sun, 29 Nov 2026 01:00:00 +0000"],
        ["Message-Id", message_id or new_message_id()],
        ["Subject", subject],
        ["To", f"Support <{recipient}>"],
        ["Content-Type", 'text/plain; charset="UTF-8"'],
        *[[name, value] for name, value in extra_headers],
    ]
    return {
        "recipient": recipient,
        "sender": envelope_sender or sender,
        "from": f"Ada Lovelace <{sender}>",
        "subject": subject,
        "body-plain": text,
        "stripped-text": text,
        "stripped-signature": "",
        "message-headers": json.dumps(headers),
        **{name: value for name, value in headers if name.startswith("X-Mailgun")},
    }


def post_mailgun(client, fields, *, auth=None, signed=True, path="inbound"):
    data = mailgun_sign(fields) if signed else fields
    return client.post(f"/anymail/mailgun/{path}/", data, **(basic_auth() if auth is None else auth))


def mailgun_mime_fields(
    *, sender="ada@example.com", recipient=INBOX, spf="Pass", dkim="Pass", text="My kettle arrived broken.", **headers
) -> dict:
    """Mailgun's forward() to a URL ending in `mime`: the raw message in body-mime, Mailgun's
    headers prepended to it."""
    message = EmailMessage()
    message["X-Mailgun-Spf"] = spf
    message["X-Mailgun-Dkim-Check-Result"] = dkim
    message["From"] = f"Ada Lovelace <{sender}>"
    message["To"] = recipient
    message["Subject"] = headers.pop("subject", "Broken kettle")
    message["Message-ID"] = headers.pop("message_id", None) or new_message_id()
    for name, value in headers.items():
        message[name.replace("_", "-")] = value
    message.set_content(text)
    message.add_attachment(b"\x89PNG fake image bytes", maintype="image", subtype="png", filename="kettle.png")
    return {"recipient": recipient, "sender": sender, "body-mime": message.as_string()}
