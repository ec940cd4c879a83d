package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/fanout"
)

// fakeNode is a node's state: leases applied in revision order, each
// published to hub after it is applied.
type fakeNode struct {
	hub      *fanout.Hub
	mu       sync.Mutex
	leases   map[string]lease.Lease
	revision uint64
}

func newFakeNode(t *testing.T) *fakeNode {
	hub := fanout.NewHub(64, 64, func(lease.Event) *fencedv1.Event { return &fencedv1.Event{} })
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go hub.Run(done)
	return &fakeNode{hub: hub, leases: map[string]lease.Lease{}}
}

func (f *fakeNode) acquire(key string) {
	f.mu.Lock()
	f.revision++
	l := lease.Lease{Key: key, Owner: "o", Token: f.revision, TTL: time.Minute}
	f.leases[key] = l
	ev := lease.Event{Type: lease.Acquired, Lease: l, Revision: f.revision}
	f.mu.Unlock()
	f.hub.Publish(ev)
}

func free(context.Context) (func(), error) { return func() {}, nil }

// node is the Node of f: every slot free, caught up, admitting all.
func (f *fakeNode) node() Node {
	return Node{
		Stats:       func() any { return map[string]int{"leases": len(f.leases)} },
		CheckPrefix: func(string) error { return nil },
		Admit:       func(*http.Request) (func(), error) { return func() {}, nil },
		CaughtUp:    func(context.Context) bool { return true },
		Hub:         f.hub,
		Leases: func(prefix string) ([]*fencedv1.Lease, uint64) {
			f.mu.Lock()
			defer f.mu.Unlock()
			var wire []*fencedv1.Lease
			for _, l := range f.leases {
				if strings.HasPrefix(l.Key, prefix) {
					wire = append(wire, f.wire(l))
				}
			}
			sort.Slice(wire, func(i, j int) bool { return wire[i].Key < wire[j].Key })
			return wire, f.revision
		},
		Lease:      f.wire,
		ReadSlot:   free,
		FanoutSlot: free,
	}
}

func (f *fakeNode) wire(l lease.Lease) *fencedv1.Lease {
	return &fencedv1.Lease{Key: l.Key, Owner: l.Owner, Token: l.Token, TtlMs: l.TTL.Milliseconds(), RemainingMs: 1234}
}

// get serves one request of h and returns the response.
func get(h *Handler, target string) *httptest.ResponseRecorder {
	mux := http.NewServeMux()
	h.Register(mux)
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(http.MethodGet, target, nil))
	return w
}

// A dashboard given a shared snapshot gets every transition after it
// exactly once, from the replay or its subscription.
func TestSharedSnapshotNoGapNoDuplicate(t *testing.T) {
	f := newFakeNode(t)
	h := New(f.node())
	ctx := context.Background()
	f.acquire("d/1")
	sub1, _, _, rev1, ok := h.snapshots.Subscribe(ctx, f.hub, "d/", h.buildSnapshot)
	if !ok {
		t.Fatal("first snapshot failed")
	}
	defer f.hub.Unsubscribe(sub1)
	f.acquire("d/2")
	for seen := false; !seen; { // until the acquisition of d/2 is dispatched
		<-sub1.Ready()
		for _, ev := range sub1.Take() {
			seen = seen || ev.Lease.Key == "d/2" && ev.Revision > rev1
		}
	}
	sub2, json2, replay, rev2, ok := h.snapshots.Subscribe(ctx, f.hub, "d/", h.buildSnapshot)
	if !ok {
		t.Fatal("second snapshot failed")
	}
	defer f.hub.Unsubscribe(sub2)
	var snap struct {
		Leases []struct {
			Key string `json:"key"`
		} `json:"leases"`
	}
	if err := json.Unmarshal(json2, &snap); err != nil {
		t.Fatal(err)
	}
	inSnap := slices.ContainsFunc(snap.Leases, func(l struct {
		Key string `json:"key"`
	}) bool {
		return l.Key == "d/2"
	})
	inReplay := slices.ContainsFunc(replay, func(ev *fanout.Event) bool { return ev.Lease.Key == "d/2" && ev.Revision > rev2 })
	if inSnap == inReplay {
		t.Fatalf("d/2 in the snapshot: %v, in the replay: %v; want exactly one", inSnap, inReplay)
	}
}

// GET /v1/events sends the snapshot of the prefix's leases, then their
// transitions, each lease in the form Node.Lease gives it.
func TestEventsStream(t *testing.T) {
	f := newFakeNode(t)
	f.acquire("d/1")
	f.acquire("other")
	mux := http.NewServeMux()
	New(f.node()).Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/events?prefix=d/", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var text string
	buf := make([]byte, 4096)
	readUntil := func(s string) {
		for !strings.Contains(text, s) || !strings.HasSuffix(text, "\n\n") {
			n, err := resp.Body.Read(buf)
			text += string(buf[:n])
			if err != nil {
				t.Fatalf("stream ended: %v; read %q", err, text)
			}
		}
	}
	readUntil("event: snapshot")
	f.acquire("other/2")
	f.acquire("d/2")
	readUntil(`"key":"d/2"`)
	want := "retry: 1000\n\n" +
		"event: snapshot\ndata: {\"revision\":2,\"leases\":[{\"key\":\"d/1\",\"owner\":\"o\",\"token\":\"1\",\"ttlMs\":60000,\"remainingMs\":1234}]}\n\n" +
		"event: lease\ndata: {\"type\":\"ACQUIRED\",\"revision\":4,\"lease\":{\"key\":\"d/2\",\"owner\":\"o\",\"token\":\"4\",\"ttlMs\":60000,\"remainingMs\":1234}}\n\n"
	if text != want {
		t.Errorf("stream\n%q\nwant\n%q", text, want)
	}
}

// A bad prefix is answered 400 and a full stream limit 429, each with the
// node's error; a node not caught up sends nothing and builds no snapshot.
func TestEventsRefused(t *testing.T) {
	f := newFakeNode(t)
	node := f.node()
	node.CheckPrefix = func(p string) error {
		if p == "bad" {
			return errors.New("key: bad")
		}
		return nil
	}
	released := 0
	node.Admit = func(r *http.Request) (func(), error) {
		if r.URL.Query().Get("prefix") == "full" {
			return nil, errors.New("too many event subscribers")
		}
		return func() { released++ }, nil
	}
	node.CaughtUp = func(context.Context) bool { return false }
	node.Leases = func(string) ([]*fencedv1.Lease, uint64) {
		t.Error("a snapshot built before the node caught up")
		return nil, 0
	}
	h := New(node)
	if w := get(h, "/v1/events?prefix=bad"); w.Code != http.StatusBadRequest || w.Body.String() != "key: bad\n" {
		t.Errorf("bad prefix: %d %q", w.Code, w.Body)
	}
	if w := get(h, "/v1/events?prefix=full"); w.Code != http.StatusTooManyRequests || w.Body.String() != "too many event subscribers\n" {
		t.Errorf("stream limit full: %d %q", w.Code, w.Body)
	}
	if w := get(h, "/v1/events?prefix=d/"); w.Body.Len() != 0 {
		t.Errorf("not caught up: sent %q", w.Body)
	}
	if released != 1 {
		t.Errorf("stream slot released %d times, want 1", released)
	}
}

// At most maxBuilds snapshots are built at once, each within a read slot;
// a build gives up, and gives its slots back, when its caller leaves.
func TestBuildSnapshotSlots(t *testing.T) {
	f := newFakeNode(t)
	node := f.node()
	reads := 0
	node.ReadSlot = func(ctx context.Context) (func(), error) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		reads++
		return func() { reads-- }, nil
	}
	h := New(node)
	for range maxBuilds {
		h.building <- struct{}{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, ok := h.buildSnapshot(ctx, ""); ok {
		t.Fatal("built a snapshot with every build slot taken")
	}
	<-h.building
	if _, _, ok := h.buildSnapshot(ctx, ""); ok {
		t.Fatal("built a snapshot without a read slot")
	}
	if len(h.building) != maxBuilds-1 {
		t.Fatalf("%d build slots taken after a build gave up, want %d", len(h.building), maxBuilds-1)
	}
	f.acquire("a")
	js, rev, ok := h.buildSnapshot(context.Background(), "")
	if !ok || rev != 1 || !strings.Contains(string(js), `"key":"a"`) {
		t.Fatalf("snapshot %s at %d (%v)", js, rev, ok)
	}
	if reads != 0 || len(h.building) != maxBuilds-1 {
		t.Errorf("after a build: %d read slots, %d build slots taken", reads, len(h.building))
	}
}

// GET /v1/stats is the node's Stats in JSON; GET / is the page.
func TestStatsAndPage(t *testing.T) {
	f := newFakeNode(t)
	f.acquire("a")
	h := New(f.node())
	w := get(h, "/v1/stats")
	if ct := w.Header().Get("Content-Type"); ct != "application/json" || w.Body.String() != "{\"leases\":1}\n" {
		t.Errorf("stats: %q %q", ct, w.Body)
	}
	w = get(h, "/")
	page, _ := io.ReadAll(w.Body)
	if w.Code != http.StatusOK || !strings.Contains(string(page), "<html") {
		t.Errorf("page: %d %.80q", w.Code, page)
	}
}
