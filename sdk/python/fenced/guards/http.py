"""HTTP: the fencing headers and problem bodies of docs/guard-spec.md, section 4.

Client side (the writer holds a lease):

    requests.put(url, data=b"...", auth=RequestsAuth(lease))   # requests
    httpx.Client(event_hooks=httpx_hooks(lease))                # httpx
    send(lease, "PUT", url, b"...")                             # urllib

Each sends Fencing-Scope, Fencing-Token, Fencing-Owner and, when the lease
has one, Fencing-Token-Signature; a 409 application/problem+json answer of
type urn:fenced:problem:stale-token loses the lease (invariant I7) and raises
StaleToken (its .response is the response). Nothing is retried.

Server side (this Python service is the resource): WSGIMiddleware and
ASGIMiddleware check every mutating request (not GET, HEAD, OPTIONS, TRACE)
against a guard with do(scope, token, apply, owner) (MemoryGuard,
PostgresGuard.tx_guard(...)); the handler runs inside the guard's check, so
its scope is locked while it runs. A handler answering >= 500, or raising,
does not record the token. Refusals are the problem+json answers of the
spec, and nothing reaches the handler.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from typing import Any, Awaitable, Callable, Dict, Iterable, List, Mapping, MutableMapping, Optional, Tuple, cast

from .. import _scope
from ..errors import (BadSignature, Duplicate, FencedError, InvalidSequence, SequenceGap, InvalidArgument, InvalidScope, NoToken, StaleToken,
                      TokenOutOfRange)
from . import lease_owner, lost

HEADER_SCOPE = "Fencing-Scope"
HEADER_TOKEN = "Fencing-Token"
HEADER_OWNER = "Fencing-Owner"
HEADER_SIGNATURE = "Fencing-Token-Signature"
HEADER_SEQUENCE = "Fencing-Sequence"
CONTENT_TYPE_PROBLEM = "application/problem+json"
PROBLEM_STALE = "urn:fenced:problem:stale-token"
PROBLEM_DUPLICATE = "urn:fenced:problem:duplicate-write"
PROBLEM_GAP = "urn:fenced:problem:sequence-gap"
MAX_SEQUENCE = 2**63 - 1
MAX_PROBLEM_BYTES = 64 << 10
SAFE_METHODS = frozenset(("GET", "HEAD", "OPTIONS", "TRACE"))


def fencing_headers(lease: Any, sequence: int = 0) -> Dict[str, str]:
    """The headers a fenced write carries (with its sequence, if any: docs/guard-spec.md section 7)."""
    h = {HEADER_SCOPE: lease.key, HEADER_TOKEN: str(lease.token)}
    if sequence:
        h[HEADER_SEQUENCE] = str(sequence)
    owner = lease_owner(lease)
    if owner:
        h[HEADER_OWNER] = owner
    sig = getattr(lease, "signature", "")
    if sig:
        h[HEADER_SIGNATURE] = sig
    return h


def refusal_from(status: int, content_type: Optional[str], body: bytes) -> Optional[FencedError]:
    """StaleToken, Duplicate or SequenceGap for a 409 problem answer, else None."""
    stale = stale_from(status, content_type, body)
    if stale is not None or status != 409 or not content_type:
        return stale
    if content_type.split(";")[0].strip().lower() != CONTENT_TYPE_PROBLEM or len(body) > MAX_PROBLEM_BYTES:
        return None
    try:
        p = json.loads(body)
        cls = {PROBLEM_DUPLICATE: Duplicate, PROBLEM_GAP: SequenceGap}.get(p.get("type"))
        if cls is None:
            return None
        return cls(str(p.get("scope", "")), int(p.get("token", 0)), int(p.get("sequence", 0)),
                   int(p.get("lastSequence", 0)))
    except (ValueError, TypeError, AttributeError):
        return None


def stale_from(status: int, content_type: Optional[str], body: bytes) -> Optional[StaleToken]:
    """The StaleToken a response reports, or None (docs/guard-spec.md, "The client helper")."""
    if status != 409 or not content_type:
        return None
    if content_type.split(";")[0].strip().lower() != CONTENT_TYPE_PROBLEM or len(body) > MAX_PROBLEM_BYTES:
        return None
    try:
        p = json.loads(body)
    except ValueError:
        return None
    if not isinstance(p, dict) or p.get("type") != PROBLEM_STALE:
        return None
    try:
        return StaleToken(str(p.get("scope", "")), int(p.get("presentedToken", 0)), int(p.get("highestToken", 0)))
    except (TypeError, ValueError):
        return None


def _refused(lease: Any, refusal: FencedError, response: Any) -> FencedError:
    """Attach the response; a stale token loses the lease, a duplicate or a gap does not."""
    setattr(refusal, "response", response)
    if isinstance(refusal, StaleToken):
        lost(lease, refusal)
    return refusal


class RequestsAuth:
    """requests auth: adds the headers and raises StaleToken (after losing the lease) on a stale
    answer, Duplicate or SequenceGap on those (a write with sequence=)."""

    def __init__(self, lease: Any, sequence: int = 0) -> None:
        self.lease, self.sequence = lease, sequence

    def __call__(self, r: Any) -> Any:
        r.headers.update(fencing_headers(self.lease, self.sequence))
        r.register_hook("response", self._response)
        return r

    def _response(self, resp: Any, *args: Any, **kwargs: Any) -> Any:
        refusal = refusal_from(resp.status_code, resp.headers.get("Content-Type"), resp.content)
        if refusal is not None:
            raise _refused(self.lease, refusal, resp)
        return resp


def httpx_hooks(lease: Any) -> Dict[str, List[Callable[[Any], None]]]:
    """event_hooks for httpx.Client (sync): headers on every request, StaleToken on a stale answer."""

    def request(req: Any) -> None:
        req.headers.update(fencing_headers(lease))

    def response(resp: Any) -> None:
        if resp.status_code == 409:
            resp.read()
            refusal = refusal_from(resp.status_code, resp.headers.get("Content-Type"), resp.content)
            if refusal is not None:
                raise _refused(lease, refusal, resp)

    return {"request": [request], "response": [response]}


def httpx_async_hooks(lease: Any) -> Dict[str, List[Callable[[Any], Awaitable[None]]]]:
    """event_hooks for httpx.AsyncClient."""

    async def request(req: Any) -> None:
        req.headers.update(fencing_headers(lease))

    async def response(resp: Any) -> None:
        if resp.status_code == 409:
            await resp.aread()
            refusal = refusal_from(resp.status_code, resp.headers.get("Content-Type"), resp.content)
            if refusal is not None:
                raise _refused(lease, refusal, resp)

    return {"request": [request], "response": [response]}


def send(lease: Any, method: str, url: str, body: Optional[bytes] = None, headers: Optional[Mapping[str, str]] = None,
         timeout: float = 10.0, sequence: int = 0) -> Tuple[int, Any, bytes]:
    """One request with urllib. Returns (status, headers, body) for every answer but a refusal:
    StaleToken (the lease is lost), Duplicate, SequenceGap."""
    h = dict(headers or {})
    h.update(fencing_headers(lease, sequence))
    req = urllib.request.Request(url, data=body, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as e:
        data = e.read()
        refusal = refusal_from(e.code, e.headers.get("Content-Type"), data)
        if refusal is not None:
            raise _refused(lease, refusal, e) from None
        return e.code, e.headers, data


# ---------------------------------------------------------------- server side


def parse_token(s: Optional[str]) -> int:
    if not s:
        raise NoToken("mutating requests need the Fencing-Scope and Fencing-Token headers")
    t, why = _scope.parse_decimal(s)
    if why:
        raise InvalidArgument(f"invalid fencing token: {s[:40]!r} {why}")
    if t == 0:
        raise InvalidArgument("invalid fencing token: 0 is never issued")
    return t


def problem_for(err: BaseException) -> Dict[str, Any]:
    """The problem body for a refusal (Go: fencehttp.ProblemFor)."""
    if isinstance(err, StaleToken):
        return {"type": PROBLEM_STALE, "title": "Stale fencing token", "status": 409, "detail": str(err),
                "scope": err.scope, "presentedToken": err.presented, "highestToken": err.highest}
    if isinstance(err, NoToken):
        return {"type": "urn:fenced:problem:missing-token", "title": "Fencing token required", "status": 428,
                "detail": "mutating requests need the Fencing-Scope and Fencing-Token headers"}
    if isinstance(err, (InvalidArgument, TokenOutOfRange)):
        return {"type": "urn:fenced:problem:invalid-token", "title": "Invalid fencing token", "status": 400,
                "detail": str(err)}
    if isinstance(err, (Duplicate, SequenceGap)):
        dup = isinstance(err, Duplicate)
        return {"type": PROBLEM_DUPLICATE if dup else PROBLEM_GAP,
                "title": "Duplicate write" if dup else "Fencing sequence gap", "status": 409, "detail": str(err),
                "scope": err.scope, "token": err.token, "sequence": err.sequence, "lastSequence": err.last}
    if isinstance(err, InvalidSequence):
        return {"type": "urn:fenced:problem:invalid-sequence", "title": "Invalid fencing sequence", "status": 400,
                "detail": str(err)}
    if isinstance(err, BadSignature):
        return {"type": "urn:fenced:problem:bad-signature", "title": "Invalid fencing token signature", "status": 403,
                "detail": str(err)}
    if isinstance(err, InvalidScope):
        return {"type": "urn:fenced:problem:invalid-scope", "title": "Invalid fencing scope", "status": 400,
                "detail": str(err)}
    return {"type": "urn:fenced:problem:guard-unavailable", "title": "Fencing guard unavailable", "status": 503,
            "detail": "the guard could not check the token; nothing was applied"}


_REASONS = {400: "Bad Request", 403: "Forbidden", 409: "Conflict", 428: "Precondition Required", 503: "Service Unavailable"}


def _credentials(get: Callable[[str], List[str]]) -> Tuple[str, int, str, Dict[str, Any]]:
    tokens = get(HEADER_TOKEN)
    if len(tokens) > 1:
        raise InvalidArgument(f"invalid fencing token: {HEADER_TOKEN} given {len(tokens)} times")
    token = parse_token(tokens[0] if tokens else "")
    scopes = get(HEADER_SCOPE)
    if len(scopes) != 1:
        raise InvalidScope(f"invalid fencing scope: {HEADER_SCOPE} given {len(scopes)} times")
    _scope.validate_scope(scopes[0])
    owners = get(HEADER_OWNER)
    owner = owners[0] if len(owners) == 1 and _scope.valid_owner(owners[0]) else ""
    sigs = get(HEADER_SIGNATURE)
    extra: Dict[str, Any] = {"signature": sigs[0]} if len(sigs) == 1 and sigs[0] else {}
    seqs = get(HEADER_SEQUENCE)
    if seqs:
        seq, why = _scope.parse_decimal(seqs[0]) if len(seqs) == 1 else (0, "given more than once")
        if why or seq == 0 or seq > MAX_SEQUENCE:
            raise InvalidSequence(f"invalid fencing sequence: {HEADER_SEQUENCE} {','.join(seqs)[:40]!r}")
        extra["sequence"] = seq
    return scopes[0], token, owner, extra


class _HandlerFailed(Exception):
    pass


class WSGIMiddleware:
    """Fences a WSGI app: app = WSGIMiddleware(app, guard)."""

    def __init__(self, app: Any, guard: Any, failed: Callable[[int], bool] = lambda status: status >= 500) -> None:
        self.app, self.guard, self.failed = app, guard, failed

    def __call__(self, environ: Dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD", "GET").upper() in SAFE_METHODS:
            return cast(Iterable[bytes], self.app(environ, start_response))

        def get(name: str) -> List[str]:
            v: Optional[str] = environ.get("HTTP_" + name.upper().replace("-", "_"))
            if v is None:
                return []
            # WSGI servers join a repeated header with ","; a token or a
            # sequence has no comma, so a repeated one shows. A scope may hold commas.
            return v.split(",") if name in (HEADER_TOKEN, HEADER_SEQUENCE) else [v]

        try:
            scope, token, owner, extra = _credentials(get)
        except FencedError as e:
            return self._problem(start_response, e)
        environ["fenced.scope"], environ["fenced.token"] = scope, token
        captured: Dict[str, Any] = {}

        def apply() -> Any:
            def sr(status: str, headers: List[Tuple[str, str]], exc_info: Any = None) -> Any:
                captured["status"], captured["headers"] = status, headers
                return lambda data: captured.setdefault("early", []).append(data)

            it = self.app(environ, sr)
            try:
                body = list(it)
            finally:
                close = getattr(it, "close", None)
                if close:
                    close()
            captured["body"] = captured.pop("early", []) + body
            if self.failed(int(captured["status"].split()[0])):
                raise _HandlerFailed()
            return None

        try:
            self.guard.do(scope, token, apply, owner=owner, **extra)
        except _HandlerFailed:
            pass
        except Exception as e:
            if "status" not in captured:
                return self._problem(start_response, e)
            if "body" not in captured:
                raise
        start_response(captured["status"], captured["headers"])
        return list(captured["body"])

    @staticmethod
    def _problem(start_response: Callable[..., Any], err: BaseException) -> List[bytes]:
        p = problem_for(err)
        body = (json.dumps(p) + "\n").encode()
        start_response(f"{p['status']} {_REASONS.get(p['status'], '')}",
                       [("Content-Type", CONTENT_TYPE_PROBLEM), ("X-Content-Type-Options", "nosniff"),
                        ("Content-Length", str(len(body)))])
        return [body]


class ASGIMiddleware:
    """Fences an ASGI app (FastAPI, Starlette): app = ASGIMiddleware(app, guard).

    The guard's do() runs on a worker thread (guards block on their
    database); the handler runs on the event loop meanwhile, inside the
    guard's check. Its answer is buffered and sent once the guard decided.
    """

    def __init__(self, app: Any, guard: Any, failed: Callable[[int], bool] = lambda status: status >= 500) -> None:
        self.app, self.guard, self.failed = app, guard, failed

    async def __call__(self, scope: MutableMapping[str, Any], receive: Callable[[], Awaitable[Any]],
                       send: Callable[[Any], Awaitable[None]]) -> None:
        if scope.get("type") != "http" or scope.get("method", "GET").upper() in SAFE_METHODS:
            await self.app(scope, receive, send)
            return
        headers: Dict[str, List[str]] = {}
        for k, v in scope.get("headers") or []:
            headers.setdefault(k.decode("latin-1").lower(), []).append(v.decode("latin-1"))
        try:
            fscope, token, owner, extra = _credentials(lambda n: headers.get(n.lower(), []))
        except FencedError as e:
            return await self._problem(send, e)
        scope = dict(scope)
        scope["fenced.scope"], scope["fenced.token"] = fscope, token
        loop = asyncio.get_running_loop()
        messages: List[Dict[str, Any]] = []

        async def buffered(message: Dict[str, Any]) -> None:
            messages.append(message)

        def apply() -> None:
            asyncio.run_coroutine_threadsafe(self.app(scope, receive, buffered), loop).result()
            start = next((m for m in messages if m["type"] == "http.response.start"), None)
            if start is None or self.failed(int(start["status"])):
                raise _HandlerFailed()

        try:
            await asyncio.to_thread(self.guard.do, fscope, token, apply, owner=owner, **extra)
        except _HandlerFailed:
            pass
        except Exception as e:
            if not messages:
                return await self._problem(send, e)
        for m in messages:
            await send(m)

    @staticmethod
    async def _problem(send: Callable[[Any], Awaitable[None]], err: BaseException) -> None:
        p = problem_for(err)
        body = (json.dumps(p) + "\n").encode()
        await send({"type": "http.response.start", "status": p["status"],
                    "headers": [(b"content-type", CONTENT_TYPE_PROBLEM.encode()), (b"x-content-type-options", b"nosniff"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
