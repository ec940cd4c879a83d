"""Exceptions, one per sentinel of the Go client and guards.

Catch the class you branch on; every one derives from FencedError, whose
``code`` is the Connect code the server answered with (or the local
equivalent). See docs/client-algorithm.md, section 8.
"""

from __future__ import annotations


class FencedError(Exception):
    """Base of every error of this package."""

    code = "unknown"

    def __init__(self, message: str = "", code: str | None = None):
        super().__init__(message)
        if code is not None:
            self.code = code


class Held(FencedError):
    """Acquire found the key held by someone else (Go: ErrHeld, *HeldError)."""

    code = "failed_precondition"

    def __init__(self, key: str, owner: str, token: int, remaining: float, message: str = ""):
        super().__init__(message or f"key {key!r} is held by {owner!r} (token {token}, {remaining:.3f}s remaining)")
        self.key, self.owner, self.token, self.remaining = key, owner, token, remaining


class AcquireUncertain(FencedError):
    """The outcome of an Acquire is unknown (Go: ErrAcquireUncertain).

    An attempt that may have been granted went unanswered and the retry found
    the key held by this very owner: most likely by that unseen grant, whose
    lease ID the caller never learned. The caller may hold the key until that
    lease expires, at most ``remaining`` seconds after the answer; it must
    not write with any token. Never reported as Held.
    """

    code = "failed_precondition"

    def __init__(self, key: str, owner: str, remaining: float, attempt: BaseException | None):
        super().__init__(
            f"acquisition outcome unknown: an attempt went unanswered ({attempt}) and the retry found "
            f"{key!r} held by this owner {owner!r}, perhaps by that attempt's grant ({remaining:.3f}s remaining)")
        self.key, self.owner, self.remaining, self.attempt = key, owner, remaining, attempt


class NotHeld(FencedError):
    """Renew or Release of a lease that is not current (Go: ErrNotHeld)."""

    code = "not_found"


class InvalidArgument(FencedError, ValueError):
    """The server refused the input, or this package refused a setting or an
    argument before sending anything (Go: ErrInvalid). Every configuration
    error of the client, the guards and the reporter is one; also a ValueError."""

    code = "invalid_argument"


class Unavailable(FencedError):
    """The call could not be served now; it may succeed on retry (Go: ErrUnavailable).

    ``may_have_arrived`` is False only when the connection was refused, which
    proves nothing was sent.
    """

    code = "unavailable"

    def __init__(self, message: str = "", code: str | None = None, may_have_arrived: bool = True):
        super().__init__(message, code)
        self.may_have_arrived = may_have_arrived


class ClusterMismatch(Unavailable):
    """An endpoint answered for another cluster than the pinned one (Go: ErrClusterMismatch).

    Its answer was not used: the endpoint counts as unavailable and the call
    went on at the next one; this is raised when none of the pinned cluster
    answered. ``endpoint``, ``pinned`` (the client's cluster ID) and ``got``
    (the endpoint's).
    """

    def __init__(self, endpoint: str, pinned: str, got: str):
        super().__init__(
            f"endpoint belongs to another cluster: {endpoint} answered for cluster {got}, but this client is "
            f"pinned to cluster {pinned}; its answer was not used (tokens of two clusters are not comparable: "
            f"check the endpoints)", may_have_arrived=False)
        self.endpoint, self.pinned, self.got = endpoint, pinned, got


class Unauthenticated(FencedError):
    """Credentials missing, unknown or expired (Go: ErrUnauthenticated)."""

    code = "unauthenticated"


class PermissionDenied(FencedError):
    """Valid credentials, but no rule grants the call (Go: ErrPermissionDenied)."""

    code = "permission_denied"


class Timeout(FencedError, TimeoutError):
    """The caller's deadline passed (Go: context.DeadlineExceeded).

    An Acquire that timed out may have been granted; that lease expires
    after its TTL.
    """

    code = "deadline_exceeded"


class LeaseLost(FencedError):
    """The lease is lost: its token must not be used again (Go: ErrLost)."""

    code = "lease_lost"


class LeaseReleased(FencedError):
    """The lease was released by its holder (Go: ErrReleased)."""

    code = "lease_released"


# Guard-side errors (Go: package fence and the guards).


class StaleToken(FencedError):
    """A guard refused a token below the highest accepted for its scope (Go: ErrStaleToken)."""

    code = "stale_token"

    def __init__(self, scope: str, presented: int, highest: int):
        super().__init__(f"stale fencing token for scope {scope!r}: presented {presented}, highest accepted {highest}")
        self.scope, self.presented, self.highest = scope, presented, highest


class BadSignature(FencedError):
    """A verifying guard refused the token's signature (Go: fence.ErrBadSignature)."""

    code = "bad_signature"


class Duplicate(FencedError):
    """A write whose sequence was already accepted under its token: not applied again,
    and not a loss of the lease (Go: fence.ErrDuplicate, docs/guard-spec.md section 7)."""

    code = "duplicate"

    def __init__(self, scope: str, token: int, sequence: int, last: int):
        super().__init__(f"duplicate write for scope {scope!r}: token {token} sequence {sequence}, "
                         f"last sequence accepted {last} (already applied)")
        self.scope, self.token, self.sequence, self.last = scope, token, sequence, last


class SequenceGap(FencedError):
    """A strict guard's refusal of a sequence other than last + 1 (Go: fence.ErrSequenceGap)."""

    code = "sequence_gap"

    def __init__(self, scope: str, token: int, sequence: int, last: int):
        super().__init__(f"fencing sequence gap for scope {scope!r}: token {token} sequence {sequence}, "
                         f"last sequence accepted {last}")
        self.scope, self.token, self.sequence, self.last = scope, token, sequence, last


class InvalidSequence(FencedError):
    """A sequence outside 1..2**63-1 (Go: fence.ErrInvalidSequence)."""

    code = "invalid_sequence"


class NoToken(FencedError):
    """Token 0 (or none) was presented (Go: fence.ErrNoToken)."""

    code = "missing_token"


class InvalidToken(InvalidArgument):
    """A Fencing-Token header that is present but not a token: not canonical decimal
    (a sign, a space, a leading zero), 0, or above 2**64-1 (Go: fencemsg.ErrInvalidToken). An absent or empty one is
    NoToken. Also an InvalidArgument, as the HTTP middleware's refusals are."""

    code = "invalid_token"


class InvalidScope(FencedError):
    """A scope that is not a valid lease key (Go: fence.ErrInvalidScope)."""

    code = "invalid_scope"


class TokenOutOfRange(FencedError):
    """A token above what the guard can store, 2**63-1 for SQL (Go: fence.ErrTokenOutOfRange)."""

    code = "token_out_of_range"


class CorruptToken(FencedError):
    """A stored token no guard could have written (negative, not digits)."""

    code = "corrupt_token"


class CommitUnknown(FencedError):
    """A guarded commit failed without the database saying it aborted the
    transaction (Go: fencesql.ErrCommitUnknown): the connection broke while
    COMMIT ran. The writes and the token are committed together or not at
    all; which, only reading the data tells. Never retried by the guard."""

    code = "commit_unknown"


class RowNotFound(FencedError):
    """RowFence.update found no row with the id (Go: fencesql.ErrRowNotFound)."""

    code = "row_not_found"


class KeyOutsideScope(FencedError):
    """A Redis key without the scope's hash tag (Go: fenceredis.ErrKeyOutsideScope)."""

    code = "key_outside_scope"


_BY_CODE: "dict[str, type[FencedError]]" = {
    "not_found": NotHeld,
    "invalid_argument": InvalidArgument,
    "unavailable": Unavailable,
    "unauthenticated": Unauthenticated,
    "permission_denied": PermissionDenied,
    "deadline_exceeded": Timeout,
}


def from_code(code: str, message: str) -> FencedError:
    """The exception for a Connect error other than a held key."""
    cls = _BY_CODE.get(code, FencedError)
    if cls is FencedError:
        return FencedError(f"{code}: {message}", code)
    return cls(f"{code}: {message}")
