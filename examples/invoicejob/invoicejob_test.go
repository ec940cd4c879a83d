package invoicejob_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/examples/invoicejob"
	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencehttp"
	"github.com/fencedio/fenced/fence/fenceredis"
	"github.com/fencedio/fenced/fence/fencesql"
	"github.com/fencedio/fenced/internal/fencedtest"
	"github.com/fencedio/fenced/internal/testenv"
)

// recording forwards to a lease and remembers every MarkLost.
type recording struct {
	fence.Lease
	mu   sync.Mutex
	lost []error
}

func (r *recording) MarkLost(err error) {
	r.mu.Lock()
	r.lost = append(r.lost, err)
	r.mu.Unlock()
	r.Lease.MarkLost(err)
}

func (r *recording) losses() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.lost)
}

// TestWorkedExample runs the worked example of docs/guards.md against a
// fenced node, PostgreSQL and Redis: a normal night, then a holder that
// stops renewing (as a paused process does) and resumes writing after
// another run took over; every one of its writes is refused and reported to
// its lease.
func TestWorkedExample(t *testing.T) {
	ctx := t.Context()
	pgURL := testenv.PostgresURL(t)
	redisAddr := testenv.RedisAddr(t)
	run := "invoicejob_" + strings.ToLower(rand.Text()[:10])

	// A private schema, so that the example's plain table names do not meet
	// other tests' tables.
	admin, err := sql.Open("pgx", pgURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	if _, err := admin.ExecContext(ctx, `CREATE SCHEMA `+run); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := admin.ExecContext(context.Background(), `DROP SCHEMA `+run+` CASCADE`); err != nil {
			t.Errorf("drop schema: %v", err)
		}
	})
	sep := "?"
	if strings.Contains(pgURL, "?") {
		sep = "&"
	}
	db, err := sql.Open("pgx", pgURL+sep+"search_path="+run)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })

	guard, err := fencesql.New(db, fencesql.Config{Dialect: fencesql.Postgres})
	if err != nil {
		t.Fatal(err)
	}
	if err := invoicejob.Migrate(ctx, db, guard); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	t.Cleanup(func() { rdb.Close() })
	counters, err := fenceredis.New(rdb, fenceredis.Config{Prefix: "fencetest:" + run + ":"})
	if err != nil {
		t.Fatal(err)
	}
	key := "jobs/invoices/" + run
	sentKey := fenceredis.Key(key, "sent")
	t.Cleanup(func() { rdb.Del(context.Background(), sentKey, counters.TokenKey(key)) })

	api := httptest.NewServer(invoicejob.API(guard))
	t.Cleanup(api.Close)
	node := fencedtest.Start(t)
	c := node.Client(t, client.Config{TTL: time.Second})

	sentTokens := func() map[int64]int64 {
		t.Helper()
		rows, err := db.QueryContext(ctx, `SELECT id, coalesce(sent_token, 0) FROM invoices`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		got := map[int64]int64{}
		for rows.Next() {
			var id, tok int64
			if err := rows.Scan(&id, &tok); err != nil {
				t.Fatal(err)
			}
			got[id] = tok
		}
		return got
	}
	sentCount := func() int64 {
		t.Helper()
		n, err := rdb.Get(ctx, sentKey).Int64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	// A normal night.
	if err := invoicejob.Run(ctx, c, key, map[int64]int64{1: 100, 2: 200}, guard, counters, api.URL); err != nil {
		t.Fatalf("first night: %v", err)
	}
	first := sentTokens()
	if len(first) != 2 || first[1] == 0 || first[1] != first[2] {
		t.Fatalf("after the first night: sent tokens %v, want invoices 1 and 2 sent with one token", first)
	}
	if n := sentCount(); n != 2 {
		t.Fatalf("sent counter %d, want 2", n)
	}

	// A holder that stops renewing, as a paused process does. The next run
	// waits in line until its lease expires, then bills.
	paused, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	paused.Orphan()
	if err := invoicejob.Run(ctx, c, key, map[int64]int64{3: 300}, guard, counters, api.URL); err != nil {
		t.Fatalf("second night: %v", err)
	}
	second := sentTokens()
	if second[3] <= int64(paused.Token()) {
		t.Fatalf("invoice 3 sent with token %d, want one above the paused holder's %d", second[3], paused.Token())
	}

	// The paused holder resumes with writes already under way (its own
	// context would be cancelled by now; these writes were past that check).
	resumed := &recording{Lease: paused}
	err = invoicejob.Bill(context.Background(), resumed, map[int64]int64{1: 1, 4: 400}, guard, counters, api.URL)
	var stale *fence.StaleTokenError
	if !errors.As(err, &stale) || stale.Presented != paused.Token() || stale.Highest != uint64(second[3]) {
		t.Fatalf("resumed holder: %v, want stale %d < %d", err, paused.Token(), second[3])
	}
	if resumed.losses() != 1 {
		t.Fatalf("resumed holder's lease told %d times it is lost, want 1", resumed.losses())
	}
	// Its request to the API is refused by the middleware too.
	hc := &http.Client{Transport: fencehttp.NewTransport(resumed, nil)}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, api.URL+"/invoices/1/sent", nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || resumed.losses() != 2 {
		t.Fatalf("resumed holder at the API: %s, %d losses; want 409 and 2", resp.Status, resumed.losses())
	}
	after := sentTokens()
	if len(after) != 3 || after[1] != first[1] || after[3] != second[3] {
		t.Fatalf("the resumed holder changed the invoices: %v, want %v", after, second)
	}
	var cents int64
	if err := db.QueryRowContext(ctx, `SELECT cents FROM invoices WHERE id = 1`).Scan(&cents); err != nil || cents != 100 {
		t.Fatalf("invoice 1 = %d cents, %v; want 100", cents, err)
	}
	if n := sentCount(); n != 3 {
		t.Fatalf("sent counter %d, want 3", n)
	}
}

// TestGuideShowsTheExample keeps the worked example of docs/guards.md
// identical to the code that TestWorkedExample runs.
func TestGuideShowsTheExample(t *testing.T) {
	src, err := os.ReadFile("invoicejob.go")
	if err != nil {
		t.Fatal(err)
	}
	guide, err := os.ReadFile("../../docs/guards.md")
	if err != nil {
		t.Fatal(err)
	}
	_, code, ok := strings.Cut(string(src), "// guide begin\n\n")
	code, _, ok2 := strings.Cut(code, "\n// guide end")
	if !ok || !ok2 {
		t.Fatal("invoicejob.go lacks the guide begin/end markers")
	}
	const marker = "<!-- worked example: examples/invoicejob/invoicejob.go -->\n```go\n"
	_, shown, ok := strings.Cut(string(guide), marker)
	shown, _, ok2 = strings.Cut(shown, "```\n")
	if !ok || !ok2 {
		t.Fatalf("docs/guards.md lacks %q followed by a go block", marker)
	}
	if shown != code {
		t.Errorf("docs/guards.md's worked example differs from invoicejob.go; paste the lines between the markers again.\nguide:\n%s\ninvoicejob.go:\n%s", shown, code)
	}
}
