"""Verifying signed tokens (docs/guard-spec.md, section 6), as Go's fence.Verifier does.

    verifier = Verifier.from_key_set(urlopen("https://fenced:7420/v1/keys").read())
    guard = PostgresGuard(verifier=verifier)
    guard.do_lease(conn, lease, write)        # sends lease.signature along

A verifying guard refuses, before the token can raise the highest, a token
whose signature is missing, malformed, made for another scope or token, or
by a key it does not trust (BadSignature; HTTP 403 from the middleware).
Needs the `cryptography` package (Debian: python3-cryptography) for
Ed25519; nothing else in this package does.
"""

from __future__ import annotations

import base64
import json
import struct
import time
from typing import Any, Mapping, Optional, Tuple, Union

from .errors import BadSignature, InvalidArgument

DOMAIN = b"fenced-token-v1\x00"


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def signed_message(key_id: str, scope: str, token: int) -> bytes:
    """What a signature covers: the domain label, key ID and scope length-prefixed, the token."""
    k, s = key_id.encode(), scope.encode()
    return DOMAIN + _uvarint(len(k)) + k + _uvarint(len(s)) + s + struct.pack(">Q", token)


def _b64url(s: str) -> bytes:
    if "=" in s or not s:
        raise ValueError("padded or empty")
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


class Verifier:
    """Trusted Ed25519 keys: {key_id: (public_key_bytes, not_after_unix or None)}."""

    def __init__(self, keys: Mapping[str, Tuple[bytes, Optional[float]]]) -> None:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        self._keys = {}
        for kid, (raw, not_after) in keys.items():
            if len(raw) != 32:
                raise InvalidArgument(f"fence: key {kid!r} is not an Ed25519 public key")
            self._keys[kid] = (Ed25519PublicKey.from_public_bytes(raw), not_after)

    @classmethod
    def from_key_set(cls, doc: Union[str, bytes, Mapping[str, Any]]) -> "Verifier":
        """From fenced's /v1/keys document (JSON text, bytes or the parsed dict)."""
        try:
            parsed: Mapping[str, Any] = json.loads(doc) if isinstance(doc, (bytes, str)) else doc
            keys = {}
            for j in parsed.get("keys") or []:
                if j.get("kty") != "OKP" or j.get("crv") != "Ed25519":
                    continue
                keys[j["kid"]] = (_b64url(j["x"]), j.get("exp") or None)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise InvalidArgument(f"fence: not a fenced key set: {type(e).__name__}: {e}") from None
        return cls(keys)

    def verify(self, scope: str, token: int, sig: str) -> None:
        """Return if sig signs token for scope by a trusted key; raise BadSignature otherwise."""
        from cryptography.exceptions import InvalidSignature

        def fail(reason: str) -> BadSignature:
            return BadSignature(f"invalid fencing token signature for scope {scope!r} token {token}: {reason}")

        if not sig:
            raise fail("no signature")
        kid, dot, enc = sig.partition(".")
        if not dot:
            raise fail("signature is not KEYID.SIGNATURE")
        if kid not in self._keys:
            raise fail(f"signed by unknown key {kid!r}")
        key, not_after = self._keys[kid]
        if not_after is not None and time.time() >= not_after:
            raise fail(f"key {kid!r} retired")
        try:
            raw = _b64url(enc)
        except ValueError:
            raw = b""
        if len(raw) != 64:
            raise fail("signature is not 64 bytes of base64url")
        try:
            key.verify(raw, signed_message(kid, scope, token))
        except InvalidSignature:
            raise fail("signature does not match the scope and token") from None


def verify(verifier: Optional[Verifier], scope: str, token: int, sig: str) -> None:
    if verifier is not None:
        verifier.verify(scope, token, sig)
