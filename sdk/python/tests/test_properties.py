"""Property tests: every guard makes the decision of docs/guard-spec.md for any token sequence."""

import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fenced
from fenced.guards.memory import MemoryGuard
from fenced.guards.redis import RedisGuard

# Tokens over the whole uint64 range, with neighbours and repeats, so that
# comparisons near 2**53, 2**63 and 2**64-1 and equal tokens all come up.
tokens = st.lists(st.one_of(st.integers(1, 2**64 - 1), st.sampled_from([1, 2, 2**53, 2**53 + 1, 2**63 - 1, 2**63,
                                                                      2**64 - 2, 2**64 - 1])),
                  min_size=1, max_size=12)


def run(do, seq):
    """Apply seq through do; return (accepted flags, model flags)."""
    highest, got, want = 0, [], []
    for t in seq:
        want.append(t >= highest)
        try:
            do(t)
            got.append(True)
        except fenced.StaleToken as e:
            assert e.highest == highest and e.presented == t
            got.append(False)
        if want[-1]:
            highest = t
    return got, want


@given(tokens)
def test_memory_guard_decides_as_the_spec(seq):
    g = MemoryGuard()
    got, want = run(lambda t: g.do("s", t, lambda: None), seq)
    assert got == want


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seq=tokens)
def test_redis_guard_decides_as_the_spec_over_all_64_bits(redis_client, seq):
    g = RedisGuard(redis_client, token_ttl=60)
    scope = "prop/" + uuid.uuid4().hex[:10]
    k = RedisGuard.key(scope, "v")
    got, want = run(lambda t: g.set(scope, t, k, str(t), ttl=60), seq)
    assert got == want
    accepted = [t for t, ok in zip(seq, want) if ok]
    assert g.highest(scope) == accepted[-1]
    assert redis_client.get(k) == str(accepted[-1]).encode()
