"""The wire, without I/O and without lease logic: HTTP/1.1 heads and chunked
bodies, Connect envelopes and error bodies, and the protobuf of a LeaseHeld
detail (docs/protocol.md).

Everything here works on bytes: decoders are fed what the connection read
and raise ValueError (or, for answers, return a FencedError) on malformed
input, never anything else. _transport drives them over asyncio streams;
tests/test_wire.py fuzzes them.
"""

from __future__ import annotations

import base64
import json
import re
import struct
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from . import errors as E

MAX_LINE = 4096  # a chunk-size or trailer line
MAX_MESSAGE = 16 << 20  # one Connect envelope's payload

END_STREAM = 0x02
COMPRESSED = 0x01

Headers = Dict[str, str]

# ---------------------------------------------------------------- HTTP/1.1


def request_head(method: str, target: str, headers: Sequence[Tuple[str, str]]) -> bytes:
    """The request line and headers, up to and including the empty line."""
    lines = [f"{method} {target} HTTP/1.1"]
    for k, v in headers:
        if any(c in k + v for c in "\r\n\0") or not k or ":" in k:
            raise ValueError(f"invalid header {k!r}")
        lines.append(f"{k}: {v}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


_STATUS = re.compile(r"HTTP/1\.[01] ([0-9]{3})(?: .*)?\Z")
_DIGITS = re.compile(r"[0-9]{1,18}\Z")
_HEX = re.compile(rb"[0-9A-Fa-f]{1,15}\Z")


def parse_response_head(raw: bytes) -> Tuple[int, Headers]:
    """Status and headers (names lowercased) of a response head ending in an empty line."""
    if not raw.endswith(b"\r\n\r\n"):
        raise ValueError("response head does not end with an empty line")
    lines = raw[:-4].decode("latin-1").split("\r\n")
    m = _STATUS.match(lines[0])
    if m is None:
        raise ValueError(f"malformed status line {lines[0][:80]!r}")
    headers: Headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise ValueError(f"malformed header line {line[:80]!r}")
        headers[name.lower()] = value.strip()
    return int(m.group(1)), headers


def body_framing(headers: Mapping[str, str]) -> Tuple[bool, Optional[int]]:
    """(chunked, content length): a body without either runs to the end of the connection."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return True, None
    if "content-length" not in headers:
        return False, None
    n = headers["content-length"]
    if not _DIGITS.match(n):
        raise ValueError(f"invalid Content-Length {n[:40]!r}")
    return False, int(n)


class ChunkedDecoder:
    """A chunked body, decoded incrementally: feed() what was read, get the data.

    ``done`` once the last chunk and the trailers were read; bytes fed
    beyond them are in ``rest``. Malformed framing raises ValueError.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._state = "size"  # size, data, crlf, trailer
        self._left = 0
        self.done = False
        self.rest = b""

    def _line(self) -> Optional[bytes]:
        at = self._buf.find(b"\r\n")
        if at < 0:
            if len(self._buf) > MAX_LINE:
                raise ValueError("chunk line too long")
            return None
        if at > MAX_LINE:
            raise ValueError("chunk line too long")
        line = bytes(self._buf[:at])
        del self._buf[:at + 2]
        return line

    def feed(self, data: bytes) -> bytes:
        if self.done:
            self.rest += data
            return b""
        self._buf += data
        out = bytearray()
        while True:
            if self._state == "size":
                line = self._line()
                if line is None:
                    break
                size = line.split(b";", 1)[0].strip(b" \t")
                if not _HEX.match(size):
                    raise ValueError(f"invalid chunk size {line[:40]!r}")
                self._left = int(size, 16)
                self._state = "data" if self._left else "trailer"
            elif self._state == "data":
                if not self._buf:
                    break
                n = min(self._left, len(self._buf))
                out += self._buf[:n]
                del self._buf[:n]
                self._left -= n
                if self._left == 0:
                    self._state = "crlf"
            elif self._state == "crlf":
                if len(self._buf) < 2:
                    break
                if self._buf[:2] != b"\r\n":
                    raise ValueError("chunk data not followed by CRLF")
                del self._buf[:2]
                self._state = "size"
            else:  # trailer lines, up to an empty one
                line = self._line()
                if line is None:
                    break
                if line == b"":
                    self.done = True
                    self.rest = bytes(self._buf)
                    self._buf.clear()
                    break
        return bytes(out)


def chunked(data: bytes, sizes: Sequence[int] = ()) -> bytes:
    """data as a chunked body, cut in pieces of the given sizes (then the rest)."""
    out, at = bytearray(), 0
    for n in list(sizes) + [len(data)]:
        piece = data[at:at + n]
        if piece:
            out += b"%x\r\n%s\r\n" % (len(piece), piece)
        at += len(piece)
    return bytes(out + b"0\r\n\r\n")


# ---------------------------------------------------------------- Connect


def envelope(flags: int, payload: bytes) -> bytes:
    """One Connect streaming envelope: a flags byte, a 32-bit big-endian length, the payload."""
    return bytes([flags]) + struct.pack(">I", len(payload)) + payload


class EnvelopeDecoder:
    """Connect streaming envelopes, decoded incrementally from a body's bytes."""

    def __init__(self, limit: int = MAX_MESSAGE) -> None:
        self._buf = bytearray()
        self.limit = limit

    @property
    def pending(self) -> int:
        """Bytes of an envelope not complete yet."""
        return len(self._buf)

    def feed(self, data: bytes) -> List[Tuple[int, bytes]]:
        self._buf += data
        out: List[Tuple[int, bytes]] = []
        while len(self._buf) >= 5:
            flags = self._buf[0]
            n = struct.unpack(">I", self._buf[1:5])[0]
            if flags & COMPRESSED:
                raise ValueError("compressed envelope (no compression was negotiated)")
            if n > self.limit:
                raise ValueError(f"envelope of {n} bytes, above the limit of {self.limit}")
            if len(self._buf) < 5 + n:
                break
            out.append((flags, bytes(self._buf[5:5 + n])))
            del self._buf[:5 + n]
        return out


def decode_message(data: bytes) -> Dict[str, Any]:
    """A JSON message; FencedError (code internal) when it is not a JSON object."""
    try:
        m = json.loads(data) if data else {}
    except ValueError as e:  # also a UnicodeDecodeError
        raise E.FencedError(f"internal: malformed message: {e}", "internal") from None
    if not isinstance(m, dict):
        raise E.FencedError("internal: a message that is not a JSON object", "internal")
    return m


_HTTP_TO_CODE = {400: "internal", 401: "unauthenticated", 403: "permission_denied", 404: "unimplemented",
                 429: "unavailable", 502: "unavailable", 503: "unavailable", 504: "unavailable"}


def connect_error(status: int, data: bytes) -> E.FencedError:
    """The exception for a failed unary call: Connect's error body, or the HTTP status."""
    try:
        body = json.loads(data) if data else {}
    except ValueError:
        body = {}
    code = body.get("code") if isinstance(body, dict) else None
    if not isinstance(code, str) or not code:
        code = _HTTP_TO_CODE.get(status, "unknown")
        return E.from_code(code, f"HTTP {status}: {data[:200].decode('utf-8', 'replace')}")
    return error_from_body(body)


def _int(v: object) -> int:
    if isinstance(v, bool):
        return 0
    if isinstance(v, int):
        return v
    if isinstance(v, str) and re.fullmatch(r"-?[0-9]{1,20}", v):
        return int(v)
    return 0


def error_from_body(body: Mapping[str, Any]) -> E.FencedError:
    """The exception for a Connect error body ({"code", "message", "details"})."""
    code, msg = body.get("code"), body.get("message")
    code = code if isinstance(code, str) and code else "unknown"
    msg = msg if isinstance(msg, str) else ""
    details = body.get("details")
    if code == "failed_precondition" and isinstance(details, list):
        for d in details:
            if not isinstance(d, dict) or d.get("type") != "fenced.v1.LeaseHeld":
                continue
            h: Mapping[str, Any]
            try:
                h = decode_lease_held(d.get("value"))
            except ValueError:
                debug = d.get("debug")
                h = debug if isinstance(debug, dict) else {}
            key, owner = h.get("key"), h.get("owner")
            return E.Held(key if isinstance(key, str) else "", owner if isinstance(owner, str) else "",
                          _int(h.get("token")), _int(h.get("remainingMs")) / 1000, msg)
    return E.from_code(code, msg)


# ---------------------------------------------------------------- protobuf


def uvarint(n: int) -> bytes:
    """LEB128: 7 bits a byte, least significant first (protobuf's varint)."""
    if n < 0 or n >= 1 << 64:
        raise ValueError(f"{n} is not a uint64")
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def read_uvarint(b: bytes, i: int) -> Tuple[int, int]:
    """The varint at b[i:] and the index after it; ValueError if truncated or above 64 bits."""
    n = shift = 0
    while True:
        if i >= len(b):
            raise ValueError("truncated varint")
        if shift >= 64:
            raise ValueError("varint longer than 10 bytes")
        c = b[i]
        i += 1
        n |= (c & 0x7F) << shift
        if c < 0x80:
            if n >= 1 << 64:
                raise ValueError("varint above 64 bits")
            return n, i
        shift += 7


_LEASE_HELD = {1: "key", 2: "owner", 3: "token", 4: "remainingMs"}


def decode_lease_held(value: object) -> Dict[str, Any]:
    """The fields of a fenced.v1.LeaseHeld (unpadded base64 protobuf):
    1 key, 2 owner (strings), 3 token (uint64), 4 remainingMs (int64)."""
    if not isinstance(value, str):
        raise ValueError("LeaseHeld value is not a string")
    raw = base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
    out: Dict[str, Any] = {"key": "", "owner": "", "token": 0, "remainingMs": 0}
    i = 0
    while i < len(raw):
        tag, i = read_uvarint(raw, i)
        num, wt = tag >> 3, tag & 7
        v: Any = None
        if wt == 0:
            v, i = read_uvarint(raw, i)
            if num == 4 and v >= 1 << 63:
                v -= 1 << 64
        elif wt == 2:
            n, i = read_uvarint(raw, i)
            if i + n > len(raw):
                raise ValueError("truncated field")
            v = raw[i:i + n].decode("utf-8", "replace")
            i += n
        elif wt in (1, 5):
            i += 8 if wt == 1 else 4
            if i > len(raw):
                raise ValueError("truncated field")
        else:
            raise ValueError(f"wire type {wt}")
        name = _LEASE_HELD.get(num)
        if name is not None and v is not None and isinstance(v, str) == (name in ("key", "owner")):
            out[name] = v
    return out
