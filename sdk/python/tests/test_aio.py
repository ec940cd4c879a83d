"""fenced.aio: the same algorithm on the caller's event loop."""

import asyncio
import time

import pytest

import fenced
from fenced import aio


def test_aio_acquire_renew_watch_release(server, key):
    async def main():
        async with aio.Client(server.url, ttl=1) as client:
            start = (await client.list(key)).revision
            events = []

            async def watch():
                async for ev in client.watch(key, after_revision=start):
                    events.append(ev)
                    if len(events) == 2:
                        return

            watcher = asyncio.create_task(watch())
            async with client.acquire(key, ttl=1) as lease:
                await asyncio.sleep(2.2)  # renewed on this loop
                lease.check()
                assert (await client.get(key)).lease.token == lease.token
                with pytest.raises(fenced.Held):
                    await client.acquire(key, owner="other")
            await asyncio.wait_for(watcher, 5)
            assert [e.type for e in events] == ["ACQUIRED", "RELEASED"]
            with pytest.raises(fenced.LeaseReleased):
                lease.check()

            lease = await client.acquire(key)
            await client.release(key, lease.lease_id)
            await asyncio.wait_for(lease.lost.wait(), 3)
            with pytest.raises(fenced.LeaseLost):
                lease.check()

    asyncio.run(main())


def test_aio_check_sees_the_deadline_even_with_a_blocked_loop(server, key):
    async def main():
        client = aio.Client(server.url)
        lease = await client.acquire(key, ttl=1)
        time.sleep(1.1)  # blocks the loop: no renewal, no timer
        with pytest.raises(fenced.LeaseLost, match="deadline"):
            lease.check()
        await client.close()

    asyncio.run(main())
