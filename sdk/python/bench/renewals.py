"""CPU per renewal: one process keeps N leases alive on one client.

    python3 sdk/python/bench/renewals.py --endpoint http://127.0.0.1:7420 --leases 1000 --ttl 10 --seconds 60

Acquires N leases, then measures this process's CPU time (user + system,
all threads) over the window and divides it by the renewals the client sent
in it (each answered; a failed renewal is counted and reported apart).
"""

import argparse
import os
import resource
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from fenced import Client  # noqa: E402


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--endpoint", default="http://127.0.0.1:7420")
    p.add_argument("--leases", type=int, default=1000)
    p.add_argument("--ttl", type=float, default=10)
    p.add_argument("--seconds", type=float, default=60)
    a = p.parse_args()
    c = Client(a.endpoint, ttl=a.ttl)
    counts = {"ok": 0, "failed": 0}

    def observe(method, msg):
        if method != "Renew":
            return None
        return lambda status, data, exc: counts.__setitem__("ok" if status == 200 else "failed",
                                                           counts["ok" if status == 200 else "failed"] + 1)

    t0, c0 = time.monotonic(), cpu()
    prefix = f"bench/renew/{os.getpid()}/"
    leases = [c.acquire(prefix + str(i)) for i in range(a.leases)]
    acquired, acquire_cpu = time.monotonic() - t0, cpu() - c0
    c._session.observe = observe
    time.sleep(a.ttl / 3)  # let the renewals spread over the interval
    counts.update(ok=0, failed=0)
    c1, t1 = cpu(), time.monotonic()
    time.sleep(a.seconds)
    used, wall = cpu() - c1, time.monotonic() - t1
    n = counts["ok"]
    lost = sum(l.lost.is_set() for l in leases)
    print(f"{a.leases} leases, TTL {a.ttl:g}s: acquired in {acquired:.2f}s ({acquire_cpu / a.leases * 1e6:.0f} us CPU each)")
    print(f"{n} renewals in {wall:.1f}s ({n / wall:.0f}/s), {counts['failed']} failed, {lost} leases lost")
    print(f"CPU {used:.2f}s = {used / wall * 100:.1f}% of a core, {used / max(n, 1) * 1e6:.0f} us per renewal")
    c.close()


if __name__ == "__main__":
    main()
