"""MemoryGuard: highest tokens in this process's memory (Go: fence.NewMemory), for
resources that live in the process and die with it."""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, Optional

from .. import _scope
from ..sign import Verifier, verify
from ..errors import Duplicate, FencedError, InvalidSequence, SequenceGap, StaleToken
from . import Decision


class MemoryGuard:
    """do(scope, token, apply) runs apply() while scope is locked, if token is not stale."""

    def __init__(self, observer: Optional[Callable[[Decision], None]] = None, verifier: Optional[Verifier] = None,
                 strict_sequences: bool = False) -> None:
        self.strict_sequences = strict_sequences
        self._last: Dict[str, int] = {}  # scope -> the last sequence accepted under its highest token
        self._mu = threading.Lock()
        self._locks: Dict[str, threading.Lock] = {}
        self._highest: Dict[str, int] = {}
        self.observer, self.verifier = observer, verifier

    def _lock(self, scope: str) -> threading.Lock:
        with self._mu:
            return self._locks.setdefault(scope, threading.Lock())

    def do(self, scope: str, token: int, apply: Callable[[], Any], owner: str = "", signature: str = "",
           sequence: int = 0) -> Any:
        _scope.check(scope, token, 0)
        if sequence < 0 or sequence > 2**63 - 1:
            raise InvalidSequence(f"invalid fencing sequence: {sequence} is outside 1..{2**63 - 1}")
        verify(self.verifier, scope, token, signature)
        with self._lock(scope):
            h, last = self._highest.get(scope, 0), self._last.get(scope, 0)
            err: Optional[FencedError] = None
            decision: Optional[Decision]
            if token < h:
                err, decision = StaleToken(scope, token, h), Decision(scope, token, h, False, owner)
            elif sequence and token == h and sequence <= last:
                err, decision = Duplicate(scope, token, sequence, last), Decision(scope, token, h, False, owner, True)
            elif sequence and token == h and self.strict_sequences and sequence != last + 1:
                err, decision = SequenceGap(scope, token, sequence, last), None
            else:
                result = apply()
                self._highest[scope] = token
                self._last[scope] = sequence if sequence else (0 if token > h else last)
                decision = Decision(scope, token, h, True, owner)
        if self.observer is not None and decision is not None:
            self.observer(decision)
        if err is not None:
            raise err
        return result

    def highest(self, scope: str) -> int:
        return self._highest.get(scope, 0)
