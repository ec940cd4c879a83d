"""MemoryGuard: highest tokens in this process's memory (Go: fence.NewMemory), for
resources that live in the process and die with it."""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional

from .. import _scope
from ..sign import verify
from ..errors import StaleToken
from . import Decision


class MemoryGuard:
    """do(scope, token, apply) runs apply() while scope is locked, if token is not stale."""

    def __init__(self, observer: Optional[Callable[[Decision], None]] = None, verifier=None):
        self._mu = threading.Lock()
        self._locks: dict = {}
        self._highest: dict = {}
        self.observer, self.verifier = observer, verifier

    def _lock(self, scope):
        with self._mu:
            return self._locks.setdefault(scope, threading.Lock())

    def do(self, scope: str, token: int, apply: Callable[[], Any], owner: str = "", signature: str = "") -> Any:
        _scope.check(scope, token, 0)
        verify(self.verifier, scope, token, signature)
        with self._lock(scope):
            h = self._highest.get(scope, 0)
            try:
                _scope.check(scope, token, h)
            except StaleToken:
                decision = Decision(scope, token, h, False, owner)
                result, err = None, True
            else:
                result = apply()
                self._highest[scope] = token
                decision, err = Decision(scope, token, h, True, owner), False
        if self.observer is not None:
            self.observer(decision)
        if err:
            raise StaleToken(scope, token, h)
        return result

    def highest(self, scope: str) -> int:
        return self._highest.get(scope, 0)
