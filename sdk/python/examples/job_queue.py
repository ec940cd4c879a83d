"""A job queue in PostgreSQL, worked by holders of fenced leases (docs/job-queue.md).

Each job has a lease key, ``jobs/<id>``. A worker that takes the lease first
makes a *claim write*, fenced with its token; then it works; then it writes
the result, fenced with the same token. The claim raises the job's highest
token before any work starts, so a paused former holder that wakes up has
its result refused even though the new holder has not finished yet.
"""
from __future__ import annotations

from typing import Any, Callable

from fenced import Client, Lease, StaleToken
from fenced.guards.postgres import PostgresGuard

guard = PostgresGuard()


def migrate(db: Any) -> None:
    """The guard's scope table and the jobs table."""
    guard.migrate(db)
    with db.cursor() as cur:
        cur.execute("""CREATE TABLE IF NOT EXISTS jobs (
            id           bigint PRIMARY KEY,
            state        text NOT NULL DEFAULT 'queued',   -- queued, running, done
            claimed_by   text,
            claim_token  bigint,
            result       text)""")
    db.commit()


def claim(db: Any, lease: Lease, job_id: int) -> bool:
    """The claim write: mark the job running under this token. False if it is done."""
    def write(cur: Any) -> bool:
        cur.execute("SELECT state FROM jobs WHERE id = %s FOR UPDATE", (job_id,))
        row = cur.fetchone()
        if row is None or row[0] == "done":
            return False
        cur.execute("UPDATE jobs SET state = 'running', claimed_by = %s, claim_token = %s WHERE id = %s",
                    (lease.owner, lease.token, job_id))
        return True

    return bool(guard.do_lease(db, lease, write))


def finish(db: Any, lease: Lease, job_id: int, result: str) -> None:
    """The fenced result: refused (StaleToken) if a newer holder has claimed the job."""
    guard.do_lease(db, lease, lambda cur: cur.execute(
        "UPDATE jobs SET state = 'done', result = %s WHERE id = %s", (result, job_id)))


def run_job(client: Client, db: Any, job_id: int, work: Callable[[Lease], str]) -> str:
    """Take the job's lease, claim, work, write the result; return what happened."""
    with client.acquire(f"jobs/{job_id}", ttl=10, wait=30) as lease:
        try:
            if not claim(db, lease, job_id):
                return "already done"
            result = work(lease)        # long work: call lease.check() between steps
            finish(db, lease, job_id, result)
            return "done"
        except StaleToken:
            return "taken over"         # do_lease has marked the lease lost: stop, never retry
