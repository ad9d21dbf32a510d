"""Text no column should take: the one rule for strings from outside (files, requests)."""

import re

# C0 control characters except tab, newline and carriage return: BadInputMiddleware
# (refundagent/config/middleware.py) refuses them in requests, the importer in files. NUL breaks
# PostgreSQL text columns; the others have no business in an id, a name or a note.
CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")
# A lone surrogate (JSON "\ud800") is not Unicode: neither database driver can encode it.
LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")
# What looks like a card number (13 to 19 digits, spaces or dashes between): never in a payout
# reference (ledger.services), a customer reply (refundagent.emails) or the stored trace
# (refundagent.redaction, which adds word boundaries to replace it).
CARD_NUMBER = re.compile(r"(?:\d[ -]?){12,18}\d")


def text_problem(value: str) -> str | None:
    """What makes `value` unfit to store ("contains a control character ..."), or None."""
    if CONTROL_CHARS.search(value):
        return "contains a control character (NUL or another C0 control)"
    if LONE_SURROGATE.search(value):
        return "contains a lone surrogate (not valid Unicode)"
    return None


def json_strings(value):
    """Every string in a parsed JSON value, object keys included. Iterative: a document nested
    as deep as the parser allows must not hit the recursion limit here."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            yield from item.keys()
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def text_shown(value) -> str:
    """A refused value as a message quotes it: its repr (control characters escaped), cut short."""
    shown = repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."
