"""fenced: the Python client and guards of the fenced lease service.

The client follows docs/client-algorithm.md and the guards
docs/guard-spec.md of the fenced repository, exactly as the Go client and
guards do, so a Python guard and a Go guard on one scope refuse each
other's stale tokens.
"""

from ._core import Config, Event, LeaseInfo
from ._scope import valid_owner, validate_scope
from .client import Client, GetResult, Lease, ListResult, Watch
from .errors import (AcquireUncertain, BadSignature, ClusterMismatch, CommitUnknown, CorruptToken, Duplicate, FencedError, Held, InvalidArgument,
                     InvalidScope, InvalidSequence, InvalidToken, SequenceGap,
                     KeyOutsideScope, LeaseLost, LeaseReleased, NoToken, NotHeld, PermissionDenied,
                     RowNotFound, StaleToken, Timeout, TokenOutOfRange, Unauthenticated, Unavailable)

__all__ = [
    "AcquireUncertain", "BadSignature", "Client", "ClusterMismatch", "CommitUnknown", "Config", "CorruptToken", "Duplicate", "Event", "FencedError", "GetResult", "Held",
    "InvalidArgument", "InvalidScope", "InvalidSequence", "InvalidToken", "KeyOutsideScope", "Lease", "LeaseInfo", "LeaseLost", "LeaseReleased",
    "ListResult", "NoToken", "NotHeld", "PermissionDenied", "RowNotFound", "SequenceGap", "StaleToken", "Timeout",
    "TokenOutOfRange", "Unauthenticated", "Unavailable", "Watch", "valid_owner", "validate_scope",
]
