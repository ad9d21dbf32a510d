"""Django's date formats for the product's language (settings.FORMAT_MODULE_PATH): the one format
with the time zone that refundagent.labels defines, so the admin's stock change forms, readonly
fields and changelist columns, and `{{ value }}` / `|date` in any template, print dates exactly
as `labels.when` does ("2026-11-23 19:47 UTC"), never Django's locale format ("Nov. 23, 2026,
7:47 p.m."). Input formats stay Django's own (an edit field parses "2026-11-23 19:47:00")."""

from refundagent.labels import DATE_FORMAT, DATETIME_FORMAT

SHORT_DATETIME_FORMAT = DATETIME_FORMAT
SHORT_DATE_FORMAT = DATE_FORMAT

__all__ = ["DATETIME_FORMAT", "DATE_FORMAT", "SHORT_DATETIME_FORMAT", "SHORT_DATE_FORMAT"]
