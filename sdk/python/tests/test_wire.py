"""The wire layer (fenced._wire), fuzzed: round trips for what fenced sends, and
arbitrary bytes never raise anything but ValueError (or give a FencedError)."""

import base64
import json

from hypothesis import given, settings
from hypothesis import strategies as st

import fenced
from fenced import _wire

splits = st.lists(st.integers(0, 64), max_size=8)


def feed_in_pieces(dec, data, cuts):
    out, at = b"", 0
    for n in cuts + [len(data)]:
        out += dec.feed(data[at:at + n])
        at += n
    return out


@given(st.binary(max_size=2000), splits, splits)
def test_chunked_round_trip_however_the_bytes_arrive(data, sizes, cuts):
    dec = _wire.ChunkedDecoder()
    assert feed_in_pieces(dec, _wire.chunked(data, sizes) + b"next", cuts) == data
    assert dec.done and dec.rest == b"next"


def test_chunked_trailers_and_extensions():
    dec = _wire.ChunkedDecoder()
    assert dec.feed(b"3;ext=1\r\nabc\r\n0\r\nGrpc-Status: 0\r\n\r\n") == b"abc" and dec.done


@given(st.binary(max_size=300), splits)
def test_chunked_garbage_raises_only_value_error(raw, cuts):
    dec = _wire.ChunkedDecoder()
    try:
        feed_in_pieces(dec, raw, cuts)
    except ValueError:
        pass


def test_chunked_refuses_what_int_would_take():
    for bad in (b"0x3\r\nabc\r\n", b"+3\r\nabc\r\n", b"3_0\r\n", b"\r\n", b"1\r\naXY"):
        dec = _wire.ChunkedDecoder()
        try:
            dec.feed(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} accepted")


messages = st.lists(st.tuples(st.sampled_from([0, 2]), st.binary(max_size=300)), max_size=6)


@given(messages, splits)
def test_envelopes_round_trip_however_the_bytes_arrive(msgs, cuts):
    raw = b"".join(_wire.envelope(f, p) for f, p in msgs)
    dec, got, at = _wire.EnvelopeDecoder(), [], 0
    for n in cuts + [len(raw)]:
        got += dec.feed(raw[at:at + n])
        at += n
    assert got == msgs and dec.pending == 0


@given(st.binary(max_size=300))
def test_envelope_garbage_raises_only_value_error(raw):
    try:
        _wire.EnvelopeDecoder(limit=1 << 16).feed(raw)
    except ValueError:
        pass


@given(st.integers(0, 2**64 - 1), st.binary(max_size=4))
def test_uvarint_round_trip(n, tail):
    b = _wire.uvarint(n) + tail
    assert _wire.read_uvarint(b, 0) == (n, len(b) - len(tail))


@given(st.binary(max_size=12))
def test_uvarint_garbage_raises_only_value_error(raw):
    try:
        n, i = _wire.read_uvarint(raw, 0)
    except ValueError:
        return
    assert 0 <= n < 2**64 and 0 < i <= len(raw)


def lease_held(key: str, owner: str, token: int, remaining_ms: int) -> str:
    def s(num, v):
        b = v.encode()
        return _wire.uvarint(num << 3 | 2) + _wire.uvarint(len(b)) + b

    raw = (s(1, key) + s(2, owner) + _wire.uvarint(3 << 3) + _wire.uvarint(token) + _wire.uvarint(4 << 3) +
           _wire.uvarint(remaining_ms % 2**64))
    return base64.b64encode(raw).decode().rstrip("=")


@given(st.text(max_size=40), st.text(max_size=40), st.integers(0, 2**64 - 1), st.integers(-2**63, 2**63 - 1))
def test_lease_held_round_trip(key, owner, token, remaining):
    got = _wire.decode_lease_held(lease_held(key, owner, token, remaining))
    assert got == {"key": key, "owner": owner, "token": token, "remainingMs": remaining}


@given(st.one_of(st.text(max_size=60), st.binary(max_size=45).map(lambda b: base64.b64encode(b).decode())))
def test_lease_held_garbage_raises_only_value_error(value):
    try:
        _wire.decode_lease_held(value)
    except ValueError:
        pass


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                           lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=10), c, max_size=4),
                           max_leaves=20)


@settings(max_examples=300)
@given(st.integers(100, 599), st.one_of(st.binary(max_size=200), json_values.map(lambda v: json.dumps(v).encode()),
                                        st.fixed_dictionaries({"code": st.sampled_from(["failed_precondition",
                                                                                        "not_found", "x"]),
                                                               "details": json_values}).map(
                                            lambda v: json.dumps(v).encode())))
def test_any_error_answer_is_a_fenced_error(status, data):
    assert isinstance(_wire.connect_error(status, data), fenced.FencedError)


def test_held_detail_maps_to_held():
    body = {"code": "failed_precondition", "message": "held",
            "details": [{"type": "fenced.v1.LeaseHeld", "value": lease_held("k", "alice", 2**64 - 1, 1500)}]}
    err = _wire.connect_error(400, json.dumps(body).encode())
    assert isinstance(err, fenced.Held)
    assert (err.key, err.owner, err.token, err.remaining) == ("k", "alice", 2**64 - 1, 1.5)


@given(st.binary(max_size=300))
def test_response_head_garbage_raises_only_value_error(raw):
    try:
        status, headers = _wire.parse_response_head(raw + b"\r\n\r\n")
    except ValueError:
        return
    assert 100 <= status <= 999 and all(k == k.lower() for k in headers)


def test_response_head_and_framing():
    status, h = _wire.parse_response_head(b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\nX-A:  b \r\n\r\n")
    assert status == 200 and h == {"content-length": "12", "x-a": "b"}
    assert _wire.body_framing(h) == (False, 12)
    assert _wire.body_framing({"transfer-encoding": "chunked"}) == (True, None)
    for bad in ("-1", "1e3", " ", "0x10"):
        try:
            _wire.body_framing({"content-length": bad})
        except ValueError:
            continue
        raise AssertionError(bad)


def test_request_head_refuses_header_injection():
    try:
        _wire.request_head("POST", "/x", [("Authorization", "Bearer a\r\nX-Evil: 1")])
    except ValueError:
        return
    raise AssertionError("a CR LF in a header value was sent")
