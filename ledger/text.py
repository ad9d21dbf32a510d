"""Text no column should take: the one rule for strings from outside (files, requests)."""

import functools
import re
import sys

# C0 control characters except tab, newline and carriage return: BadInputMiddleware
# (refundagent/config/middleware.py) refuses them in requests, the importer in files. NUL breaks
# PostgreSQL text columns; the others have no business in an id, a name or a note.
_CONTROL_CLASS = r"\x00-\x08\x0b\x0c\x0e-\x1f"
CONTROL_CHARS = re.compile(f"[{_CONTROL_CLASS}]")
# The same rule as a JSON Schema pattern (the OpenAPI document carries it on every string a
# request may send): a string without them.
NO_CONTROL_CHARS_PATTERN = f"^[^{_CONTROL_CLASS}]*$"
# ... and not blank either: at least one character that is neither a space nor a control (a
# field whose value is stripped and then required, e.g. a reply's text or a payout reference).
NOT_BLANK_PATTERN = f"^[^{_CONTROL_CLASS}]*[^\\s{_CONTROL_CLASS}][^{_CONTROL_CLASS}]*$"
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


def _escaped(code: int) -> str:
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


@functools.cache
def printable_text_pattern() -> str:
    """`str.isprintable()` once stripped, as a JSON Schema pattern: optional whitespace (no
    control character), then printable text that starts and ends with a character that is not a
    space, then optional whitespace: a payout reference (ledger.services.payout_reference_parse).
    The character class is built from `str.isprintable` itself (about 700 ranges), so the
    document and the check cannot disagree; built when the OpenAPI document is, not at import.
    Surrogates stay out of the class: UTF-8 text cannot carry a lone one, and validators built on
    Rust's regex (pydantic's, jsonschema-rs) refuse a pattern that names them, then enforce nothing."""
    ranges, start = [], None
    for code in range(sys.maxunicode + 2):
        printable = code <= sys.maxunicode and (chr(code).isprintable() or 0xD800 <= code <= 0xDFFF)
        if not printable and start is None:
            start = code
        elif printable and start is not None:
            ranges.append(_escaped(start) if start == code - 1 else f"{_escaped(start)}-{_escaped(code - 1)}")
            start = None
    if start is not None:
        ranges.append(f"{_escaped(start)}-{_escaped(sys.maxunicode)}")
    not_printable = "".join(ranges)
    space = f"(?:(?![{_CONTROL_CLASS}])\\s)*"
    return f"^{space}[^{not_printable}\\s](?:[^{not_printable}]*[^{not_printable}\\s])?{space}$"
