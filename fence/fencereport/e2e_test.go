package fencereport_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencehttp"
	"github.com/fencedio/fenced/fence/fencereport"
	"github.com/fencedio/fenced/fence/fencesql"
	"github.com/fencedio/fenced/internal/fencedtest"
	"github.com/fencedio/fenced/internal/testenv"
	"github.com/fencedio/fenced/internal/testutil"
	"github.com/fencedio/fenced/store"
)

// TestEndToEnd: worker-A holds jobs/invoices, pauses, and its lease
// expires; worker-B takes the key and writes. A's late writes are refused
// by the reference store (ledger-http, 3 times) and by a PostgreSQL guard
// (orders-db, 2 times), whose reporters tell fenced. fenced's RPC, Watch,
// metrics and log then show each rejection with both tokens, both owners,
// both grant times, the resource and the count.
func TestEndToEnd(t *testing.T) {
	dsn := testenv.PostgresURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	logs := &testutil.SyncBuffer{}
	cfg := fencedtest.Config(t)
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	srv := fencedtest.StartConfig(t, cfg)
	fc := srv.Client(t, client.Config{})

	// Reporters of the two resources.
	newReporter := func(resource string) *fencereport.Reporter {
		r, err := fencereport.New(fencereport.Config{Resource: resource, Sender: fc, FlushInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	ledgerRep, ordersRep := newReporter("ledger-http"), newReporter("orders-db")

	st, err := store.Open(store.Config{DataDir: t.TempDir(), Observer: ledgerRep, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ledger := httptest.NewServer(st.Handler())
	defer ledger.Close()

	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	table := fmt.Sprintf("fence_report_e2e_%d", time.Now().UnixNano())
	guard, err := fencesql.New(db, fencesql.Config{Dialect: fencesql.Postgres, Table: table, Observer: ordersRep})
	if err != nil {
		t.Fatal(err)
	}
	if err := guard.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	defer db.Exec("DROP TABLE " + table)

	// Watch rejections from before the first report: sync on a marker.
	events := make(chan client.Rejection, 64)
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go fc.WatchRejections(wctx, "", func(r client.Rejection) error { events <- r; return nil })
	markers := waitWatching(t, ctx, fc, events)

	const key = "jobs/invoices"
	a, err := fc.Acquire(ctx, key, client.WithOwner("worker-A"), client.WithTTL(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	a.Orphan() // worker-A pauses: no more renewals, its lease expires
	b, err := fc.Acquire(ctx, key, client.WithOwner("worker-B"), client.WithTTL(time.Minute), client.WithWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(context.Background())

	put := func(l *client.Lease, value string) int {
		hc := &http.Client{Transport: fencehttp.NewTransport(l, nil)}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, ledger.URL+"/v1/objects/invoice-7", strings.NewReader(value))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	update := func(l *client.Lease) error {
		return guard.DoLease(ctx, l, func(ctx context.Context, tx *sql.Tx) error { return nil })
	}
	if got := put(b, "B"); got != http.StatusNoContent {
		t.Fatalf("worker-B's write to the store: %d", got)
	}
	if err := update(b); err != nil {
		t.Fatalf("worker-B's write to PostgreSQL: %v", err)
	}
	for range 3 {
		if got := put(a, "A late"); got != http.StatusConflict {
			t.Fatalf("worker-A's late write to the store: %d, want 409", got)
		}
	}
	for range 2 {
		if err := update(a); !errors.Is(err, fence.ErrStaleToken) {
			t.Fatalf("worker-A's late write to PostgreSQL: %v", err)
		}
	}
	for _, r := range []*fencereport.Reporter{ledgerRep, ordersRep} {
		if err := r.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if ledgerRep.Sent() != 3 || ordersRep.Sent() != 2 || ledgerRep.Dropped()+ordersRep.Dropped() != 0 {
		t.Fatalf("reporters sent %d and %d, dropped %d and %d", ledgerRep.Sent(), ordersRep.Sent(), ledgerRep.Dropped(), ordersRep.Dropped())
	}

	check := func(how string, r client.Rejection, resource string, count uint64) {
		t.Helper()
		if r.Scope != key || r.Resource != resource || r.Presented != a.Token() || r.Highest != b.Token() ||
			r.PresentedOwner != "worker-A" || r.HighestOwner != "worker-B" || r.ReportedOwner != "worker-A" || r.Count != count {
			t.Errorf("%s: %+v, want %s refusing worker-A's %d (x%d) after worker-B's %d", how, r, resource, a.Token(), count, b.Token())
		}
		if r.PresentedGranted.IsZero() || !r.PresentedGranted.Before(r.HighestGranted) {
			t.Errorf("%s: grant times %v and %v, want both known, A's first", how, r.PresentedGranted, r.HighestGranted)
		}
	}
	// RPC.
	list, total, err := fc.ListRejections(ctx, "jobs/", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || total != 5+markers {
		t.Fatalf("ListRejections: %d entries, total %d: %+v", len(list), total, list)
	}
	byResource := map[string]client.Rejection{list[0].Resource: list[0], list[1].Resource: list[1]}
	check("list", byResource["ledger-http"], "ledger-http", 3)
	check("list", byResource["orders-db"], "orders-db", 2)
	if list[0].ScopeCount != 5 {
		t.Errorf("newest entry's scope count %d, want 5", list[0].ScopeCount)
	}
	// Watch: one event per reported entry (late markers skipped).
	for seen := 0; seen < 2; {
		select {
		case r := <-events:
			if r.Scope == "sync/ready" {
				continue
			}
			seen++
			check("watch", r, r.Resource, map[string]uint64{"ledger-http": 3, "orders-db": 2}[r.Resource])
		case <-ctx.Done():
			t.Fatal("REJECTED events did not arrive")
		}
	}
	// Metrics.
	metrics := get(t, srv.URL+"/metrics")
	if want := fmt.Sprintf("\nfenced_stale_rejections_total %d\n", 5+markers); !strings.Contains(metrics, want) {
		t.Errorf("metrics lack %q:\n%s", want, grepLines(metrics, "rejection"))
	}
	for _, want := range []string{`fenced_stale_rejections_by_resource_total{resource="ledger-http"} 3`,
		`fenced_stale_rejections_by_resource_total{resource="orders-db"} 2`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(metrics, "rejection"))
		}
	}
	// Log: the seed's fields and the highest token's owner.
	found := map[string]bool{}
	for _, line := range strings.Split(logs.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != "stale fencing token rejected by a resource" || rec["scope"] != key {
			continue
		}
		want := map[string]any{"presented_token": float64(a.Token()), "highest_token": float64(b.Token()),
			"owner": "worker-A", "token": float64(a.Token()), "highest_owner": "worker-B"}
		for k, v := range want {
			if rec[k] != v {
				t.Errorf("log %s = %v, want %v (%s)", k, rec[k], v, line)
			}
		}
		found[fmt.Sprintf("%v %v", rec["resource"], rec["rejections"])] = true
	}
	if !found["ledger-http 3"] || !found["orders-db 2"] {
		t.Errorf("log records %v, want ledger-http with 3 rejections and orders-db with 2", found)
	}
}

// waitWatching reports a marker rejection until the watch shows one, so
// that the watch is known to be subscribed, and returns how many it
// reported.
func waitWatching(t *testing.T, ctx context.Context, fc *client.Client, events <-chan client.Rejection) uint64 {
	t.Helper()
	for n := uint64(1); ; n++ {
		if _, err := fc.ReportRejections(ctx, []client.StaleRejection{{Scope: "sync/ready", Presented: 1, Highest: 2, Resource: "test"}}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-events:
			for len(events) > 0 {
				<-events
			}
			return n
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal("watch never saw the marker")
		}
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
