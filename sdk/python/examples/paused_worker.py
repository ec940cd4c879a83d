"""Two workers write one report row. A stalls past its lease's TTL (a GC pause,
a frozen VM: no renewal goes out); B takes the lease over and writes; then A
wakes up and writes with its old token, and PostgreSQL refuses it."""
import os
import time

import psycopg

from fenced import Client, StaleToken
from fenced.guards.postgres import PostgresGuard

client = Client(os.environ.get("FENCED_ENDPOINTS", "http://127.0.0.1:7420"))
db = psycopg.connect(os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test"))
guard = PostgresGuard()
guard.migrate(db)
with db.cursor() as cur:
    cur.execute("CREATE TABLE IF NOT EXISTS report (id int PRIMARY KEY, author text)")
db.commit()


def write(lease, author):
    upsert = "INSERT INTO report VALUES (1, %s) ON CONFLICT (id) DO UPDATE SET author = excluded.author"
    guard.do_lease(db, lease, lambda cur: cur.execute(upsert, (author,)))


a = client.acquire("jobs/report", ttl=1)
a.orphan()  # A stalls: its renewals stop, and it does not look at its lease again
b = client.acquire("jobs/report", ttl=1, wait=5)  # granted once A's lease expires
write(b, "B")
print(f"B wrote with token {b.token}")
try:
    write(a, "A")  # A wakes up and writes late
except StaleToken as e:
    print(f"A's late write refused: {e}")
b.release()
with db.cursor() as cur:
    cur.execute("SELECT author FROM report WHERE id = 1")
    print("the report's author:", cur.fetchone()[0])
client.close()
