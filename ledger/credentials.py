"""Credentials at rest: every `encrypted_fields` field of every model (Shopify's client secret and
token, and any other app's), re-encrypted with the first key (docs/configuration.md, "Credentials
at rest")."""

from django.apps import apps
from django.db import transaction
from encrypted_fields.fields import EncryptedFieldMixin

BATCH = 500


def encrypted_fields_by_model() -> dict:
    """{model: [its encrypted field names]} over every installed model."""
    found = {}
    for model in apps.get_models():
        names = [f.name for f in model._meta.concrete_fields if isinstance(f, EncryptedFieldMixin)]
        if names:
            found[model] = names
    return found


def credentials_rotate() -> dict[str, int]:
    """Read each row (any configured key decrypts) and write it back (the first key encrypts).
    One transaction per model; returns {model label: rows}."""
    counts = {}
    for model, names in encrypted_fields_by_model().items():
        with transaction.atomic():
            rows = list(model._base_manager.select_for_update().only("pk", *names))
            model._base_manager.bulk_update(rows, names, batch_size=BATCH)
        counts[model._meta.label] = len(rows)
    return counts
