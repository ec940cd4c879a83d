"""The scope and owner rules shared with the Go guards (docs/guard-spec.md, section 1)."""

from __future__ import annotations

import unicodedata
from typing import Tuple

from .errors import InvalidScope, NoToken, StaleToken

MAX_SCOPE_BYTES = 512
MAX_OWNER_BYTES = 256
MAX_TOKEN = 2**64 - 1


def parse_decimal(s: str) -> Tuple[int, str]:
    """(value, "") when s is canonical decimal: "0", or a digit 1-9 then ASCII
    digits, at most MAX_TOKEN; else (0, why). One spelling per number, as the
    Go guards (docs/guard-spec.md, section 4): no sign, space or leading zero."""
    if s == "":
        return 0, "is empty"
    if not (s.isascii() and s.isdigit()):
        return 0, "is not a decimal number"
    if len(s) > 1 and s[0] == "0":
        return 0, "has a leading zero"
    if len(s) > len(str(MAX_TOKEN)) or int(s) > MAX_TOKEN:  # the length first keeps int() below its limit on digits
        return 0, "exceeds the uint64 range"
    return int(s), ""


def _graphic(ch: str) -> bool:
    cat = unicodedata.category(ch)
    return cat[0] in "LMNPS" or cat == "Zs"


def scope_problem(scope: object) -> str:
    """Why scope is not a valid scope, or "" if it is."""
    if not isinstance(scope, str):
        return "is not a string"
    if scope == "":
        return "is empty"
    try:
        raw = scope.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid UTF-8"
    if len(raw) > MAX_SCOPE_BYTES:
        return f"is {len(raw)} bytes, the limit is {MAX_SCOPE_BYTES}"
    at = 0
    for ch in scope:
        if not _graphic(ch):
            return f"has the non-printable character U+{ord(ch):04X} at byte {at}"
        at += len(ch.encode("utf-8"))
    return ""


def validate_scope(scope: object) -> None:
    """Raise InvalidScope unless scope is 1..512 bytes of printable UTF-8."""
    reason = scope_problem(scope)
    if reason:
        raise InvalidScope("invalid fencing scope: scope " + reason)


def valid_owner(owner: object) -> bool:
    """Whether owner can be carried beside a token (at most 256 bytes, printable)."""
    if not isinstance(owner, str):
        return False
    try:
        raw = owner.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return len(raw) <= MAX_OWNER_BYTES and all(_graphic(c) for c in owner)


def check(scope: str, token: int, highest: int) -> None:
    """The one decision every guard makes (Go: fence.Check)."""
    validate_scope(scope)
    if not token:
        raise NoToken("missing fencing token")
    if token < highest:
        raise StaleToken(scope, token, highest)
