"""The scope and owner rules shared with the Go guards (docs/guard-spec.md, section 1)."""

from __future__ import annotations

import unicodedata

from .errors import InvalidScope, NoToken, StaleToken

MAX_SCOPE_BYTES = 512
MAX_OWNER_BYTES = 256
MAX_TOKEN = 2**64 - 1


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
