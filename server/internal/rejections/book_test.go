package rejections

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func newTestBook(t *testing.T) (*Book, *bytes.Buffer) {
	t.Helper()
	var logged bytes.Buffer
	b, err := NewBook(prometheus.NewRegistry(), slog.New(slog.NewTextHandler(&logged, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return b, &logged
}

func unresolved(string, uint64) (Grant, bool) { return Grant{}, false }

func TestBookBounds(t *testing.T) {
	b, _ := newTestBook(t)
	now := time.Unix(1000, 0)
	for i := range MaxEntries + 10 {
		b.add(&fencedv1.StaleRejection{Scope: fmt.Sprint("k/", i), PresentedToken: 1, HighestToken: 2, Count: 2}, now, unresolved)
	}
	list, total := b.List("", 2*MaxEntries)
	if len(list) != MaxEntries || total != 2*(MaxEntries+10) {
		t.Fatalf("%d entries, total %d; want %d entries, total %d", len(list), total, MaxEntries, 2*(MaxEntries+10))
	}
	if list[0].GetScope() != fmt.Sprint("k/", MaxEntries+9) || list[len(list)-1].GetScope() != "k/10" {
		t.Errorf("kept %s..%s, want the newest", list[0].GetScope(), list[len(list)-1].GetScope())
	}
	if list[0].GetPresentedOwner() != "" || list[0].GetCount() != 2 {
		t.Errorf("unresolved entry %v", list[0])
	}
	if n := testutil.ToFloat64(b.unresolved); n != 2*(MaxEntries+10) {
		t.Errorf("unresolved counter %v, want %d", n, 2*(MaxEntries+10))
	}
	// The resource label is bounded: the 33rd resource and later count as
	// "other" (the unnamed resource above holds one of the 32).
	for i := range maxResourceLabels + 5 {
		b.add(&fencedv1.StaleRejection{Scope: "k/r", PresentedToken: 1, HighestToken: 2, Resource: fmt.Sprint("r", i)}, now, unresolved)
	}
	if n := testutil.CollectAndCount(b.byResource); n != maxResourceLabels+1 {
		t.Errorf("%d resource series, want %d and other", n, maxResourceLabels)
	}
	if got := testutil.ToFloat64(b.byResource.WithLabelValues("other")); got != 6 {
		t.Errorf("other = %v, want 6", got)
	}
}

// Record resolves both tokens, keeps one entry per scope, resource and
// presented token, and logs and publishes each entry as it stands.
func TestBookRecord(t *testing.T) {
	b, logged := newTestBook(t)
	granted := time.UnixMilli(5000)
	resolve := func(scope string, token uint64) (Grant, bool) {
		if scope == "jobs/1" && token == 3 {
			return Grant{Owner: "worker-A", At: granted}, true
		}
		if scope == "jobs/1" && token == 7 {
			return Grant{Owner: "worker-B"}, true // replayed: no time
		}
		return Grant{}, false
	}
	var published []*fencedv1.Rejection
	publish := func(e *fencedv1.Rejection) { published = append(published, e) }
	n := b.Record(context.Background(), []*fencedv1.StaleRejection{
		{Scope: "jobs/1", PresentedToken: 3, HighestToken: 7, Resource: "ledger", Count: 4},
		{Scope: "jobs/1", PresentedToken: 3, HighestToken: 5, Resource: "ledger", Owner: "said-A"},
		{Scope: "jobs/2", PresentedToken: 1, HighestToken: 2, Resource: "ledger", Owner: "said-C"},
	}, resolve, publish)
	if n != 6 {
		t.Errorf("recorded %d, want 6 (a count of 0 is one)", n)
	}
	if len(published) != 3 {
		t.Fatalf("published %d entries, want 3", len(published))
	}
	second := published[1]
	if second.GetCount() != 5 || second.GetPresentedOwner() != "worker-A" || second.GetPresentedGrantedUnixMs() != 5000 ||
		second.GetReportedOwner() != "said-A" || second.GetHighestToken() != 7 || second.GetHighestOwner() != "worker-B" ||
		second.GetHighestGrantedUnixMs() != 0 || second.GetScopeCount() != 5 || second.GetResourceCount() != 5 {
		t.Errorf("second report of jobs/1@3: %v", second)
	}
	if third := published[2]; third.GetPresentedOwner() != "said-C" || third.GetHighestOwner() != "" || third.GetResourceCount() != 6 {
		t.Errorf("unresolved entry: %v, want the reported owner as presented", third)
	}
	list, total := b.List("jobs/1", 0)
	if total != 6 || len(list) != 1 || list[0].GetCount() != 5 {
		t.Errorf("List(jobs/1) = %v, total %d", list, total)
	}
	// A published entry is a copy: later reports do not change it.
	if published[0].GetCount() != 4 {
		t.Errorf("first published entry changed to count %d", published[0].GetCount())
	}
	if got := strings.Count(logged.String(), "stale fencing token rejected by a resource"); got != 3 {
		t.Errorf("%d log records, want 3:\n%s", got, logged)
	}
	if !strings.Contains(logged.String(), "owner=worker-A") || !strings.Contains(logged.String(), "highest_owner=worker-B") {
		t.Errorf("log does not name both epochs' owners:\n%s", logged)
	}
}

// List answers newest first, the counts as they are now, at most limit
// entries, and 100 when asked for none.
func TestBookList(t *testing.T) {
	b, _ := newTestBook(t)
	now := time.Unix(1000, 0)
	for i := range defaultList + 1 {
		b.add(&fencedv1.StaleRejection{Scope: fmt.Sprint("a/", i), PresentedToken: 1, HighestToken: 2, Resource: "r"}, now, unresolved)
	}
	b.add(&fencedv1.StaleRejection{Scope: "b/1", PresentedToken: 1, HighestToken: 2, Resource: "r"}, now, unresolved)
	if list, _ := b.List("", 0); len(list) != defaultList {
		t.Errorf("limit 0: %d entries, want %d", len(list), defaultList)
	}
	list, total := b.List("a/", 2)
	if total != defaultList+2 || len(list) != 2 || list[0].GetScope() != fmt.Sprint("a/", defaultList) {
		t.Fatalf("List(a/, 2) = %v, total %d", list, total)
	}
	if list[1].GetResourceCount() != defaultList+2 {
		t.Errorf("resource count %d, want the count now, %d", list[1].GetResourceCount(), defaultList+2)
	}
}

func TestLRUCountsForgetLeastRecent(t *testing.T) {
	c := newLRUCounts(2)
	c.add("a", 1)
	c.add("b", 2)
	c.add("a", 3) // b is now least recent
	if got := c.add("c", 1); got != 1 {
		t.Errorf("new name counts %d", got)
	}
	if c.get("b") != 0 || c.get("a") != 4 || c.get("c") != 1 {
		t.Errorf("a=%d b=%d c=%d, want 4, 0 (forgotten), 1", c.get("a"), c.get("b"), c.get("c"))
	}
}

func TestCountReport(t *testing.T) {
	b, _ := newTestBook(t)
	b.CountReport(Invalid)
	b.CountReport(Invalid)
	b.CountReport(Recorded)
	if got := testutil.ToFloat64(b.reports.WithLabelValues("invalid")); got != 2 {
		t.Errorf("invalid = %v, want 2", got)
	}
	if got := testutil.ToFloat64(b.reports.WithLabelValues("denied")); got != 0 {
		t.Errorf("denied = %v, want 0", got)
	}
}

// The metric names are the node's contract with its dashboards: a second
// book on one registry is refused rather than counting apart.
func TestNewBookRegisters(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := NewBook(reg, slog.Default()); err != nil {
		t.Fatal(err)
	}
	if _, err := NewBook(reg, slog.Default()); err == nil {
		t.Error("a second book registered the same metrics")
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	// Vectors with no series yet are not gathered.
	if want := "fenced_stale_rejections_total,fenced_stale_rejections_unresolved_total"; strings.Join(names, ",") != want {
		t.Errorf("gathered %s, want %s", strings.Join(names, ","), want)
	}
}
