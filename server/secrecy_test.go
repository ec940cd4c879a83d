package server_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/internal/fencedtest"
	"github.com/fencedio/fenced/internal/testutil"
)

// teeTransport copies every response body it delivers into buf.
type teeTransport struct {
	base http.RoundTripper
	buf  *testutil.SyncBuffer
}

func (t teeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.TeeReader(resp.Body, t.buf), resp.Body}
	return resp, nil
}

// fingerprint is the documented log form of a lease ID.
func fingerprint(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])[:8]
}

// TestLeaseIDsStayWithTheirHolders runs a session of acquisitions, renewals
// (Renew and KeepAlive), releases, an expiry and hand-overs to waiters, and
// checks that no lease ID it was given appears anywhere but in the answers
// to its holder: not in Get, List, Watch, a held error, /v1/events,
// /v1/stats, /metrics, the dashboard, nor any log record. The ID is the
// capability that renews and releases a lease (I4); whoever reads it can
// end another holder's lease. Logs carry its fingerprint instead.
func TestLeaseIDsStayWithTheirHolders(t *testing.T) {
	var logs, seen testutil.SyncBuffer
	cfg := fencedtest.Config(t)
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg.RaftLogger = cfg.Logger
	srv := fencedtest.StartConfig(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// holder's answers may carry IDs; everything observer reads is checked.
	holder := newAPI(t, srv.URL)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	observerHC := &http.Client{Transport: teeTransport{base: tr, buf: &seen}}
	observer := &api{t: t, base: srv.URL, hc: observerHC}
	ids := map[string]string{} // who -> lease ID

	a := holder.acquire("s/a", "alice", 10_000)
	b := holder.acquire("s/b", "bob", 10_000)
	ids["alice"], ids["bob"] = a.LeaseID, b.LeaseID

	// The dashboard's feed starts with a snapshot of both leases.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1/events", nil)
	resp, err := observerHC.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sse := bufio.NewReader(resp.Body)
	readSSE := func(event string) string {
		t.Helper()
		for {
			line, err := sse.ReadString('\n')
			if err != nil {
				t.Fatalf("/v1/events ended waiting for %q: %v", event, err)
			}
			if line == "event: "+event+"\n" {
				data, err := sse.ReadString('\n')
				if err != nil {
					t.Fatalf("/v1/events: %v", err)
				}
				return data
			}
		}
	}
	if snap := readSSE("snapshot"); !strings.Contains(snap, `"owner":"alice"`) || !strings.Contains(snap, `"owner":"bob"`) {
		t.Fatalf("snapshot %s lacks the current leases", snap)
	}
	watch, err := fencedv1connect.NewLeaseServiceClient(observerHC, srv.URL, connect.WithProtoJSON()).
		Watch(ctx, connect.NewRequest(&fencedv1.WatchRequest{AfterRevision: uint64(a.Token) - 1}))
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()

	holder.renew("s/a", a.LeaseID)
	ka := srv.Client(t, client.Config{}).KeepAlive(ctx)
	defer ka.Close()
	if _, err := ka.Renew("s/b", b.LeaseID); err != nil {
		t.Fatal(err)
	}
	if g := observer.get("s/a"); g.Lease == nil || g.Lease.Owner != "alice" || g.Lease.Token != a.Token {
		t.Fatalf("Get s/a = %+v, want alice's lease", g.Lease)
	}
	if l := observer.list("s/", 0); len(l) != 2 {
		t.Fatalf("List = %+v, want 2 leases", l)
	}
	observer.fail("Acquire", map[string]any{"key": "s/a", "owner": "mallory", "ttlMs": 10_000}, "failed_precondition")

	// A release hands s/a to a waiter.
	w := acquireAsync(t, srv.URL, "s/a", "walt", 10_000, 10_000)
	observer.awaitMetric("fenced_waiters", 1)
	holder.release("s/a", a.LeaseID)
	rw := receive(t, w)
	if !rw.ok {
		t.Fatalf("waiter on s/a: %+v", rw)
	}
	ids["walt"] = rw.lease.LeaseID

	// An expiry hands s/c to a waiter.
	c := holder.acquire("s/c", "carol", 150)
	ids["carol"] = c.LeaseID
	x := acquireAsync(t, srv.URL, "s/c", "xena", 10_000, 10_000)
	rx := receive(t, x)
	if !rx.ok || rx.lease.Token <= c.Token {
		t.Fatalf("waiter on s/c: %+v", rx)
	}
	ids["xena"] = rx.lease.LeaseID
	observer.get("s/c")
	observer.list("", 0)

	holder.release("s/b", b.LeaseID)
	holder.release("s/a", rw.lease.LeaseID)
	holder.release("s/c", rx.lease.LeaseID)

	// Watch saw all ten transitions, the feed the eight after its snapshot,
	// with owners and tokens.
	var events []*fencedv1.Event
	for len(events) < 10 && watch.Receive() {
		events = append(events, watch.Msg().GetEvent())
	}
	if len(events) < 10 {
		t.Fatalf("Watch gave %d events, want 10: %v", len(events), watch.Err())
	}
	if e := events[0]; e.GetType() != fencedv1.Event_ACQUIRED || e.GetLease().GetOwner() != "alice" || e.GetLease().GetToken() != uint64(a.Token) {
		t.Fatalf("first event %v, want alice's grant with token %d", e, a.Token)
	}
	if e := events[5]; e.GetType() != fencedv1.Event_EXPIRED || e.GetLease().GetOwner() != "carol" {
		t.Fatalf("sixth event %v, want carol's expiry", e)
	}
	for range 8 {
		readSSE("lease")
	}
	for _, path := range []string{"/metrics", "/v1/stats", "/", "/ui/app.js"} {
		if status, _, _ := observer.do(http.MethodGet, path, "", nil); status != http.StatusOK {
			t.Fatalf("GET %s: HTTP %d", path, status)
		}
	}
	ka.Close()
	watch.Close()
	resp.Body.Close()
	cancel()
	srv.Close()

	public, logged := seen.String(), logs.String()
	for who, id := range ids {
		if id == "" {
			t.Fatalf("%s's answer has no lease ID", who)
		}
		if strings.Contains(public, id) {
			t.Errorf("%s's lease ID %s is in an answer to someone else", who, id)
		}
		if strings.Contains(logged, id) {
			t.Errorf("%s's lease ID %s is in the log", who, id)
		}
		if !strings.Contains(logged, "lease_id="+fingerprint(id)) {
			t.Errorf("log has no lease_id=%s, the fingerprint of %s's lease", fingerprint(id), who)
		}
	}
	if t.Failed() {
		t.Logf("log:\n%s", logged)
	}
}

// TestPublicAnswersOmitLeaseID: the wire contract says Get, List and Watch
// omit the lease ID, so their JSON has no "leaseId" member at all, while
// the holder's Acquire answer carries it.
func TestPublicAnswersOmitLeaseID(t *testing.T) {
	srv := fencedtest.Start(t)
	call := func(method, body string) string {
		t.Helper()
		resp, err := http.Post(srv.URL+"/fenced.v1.LeaseService/"+method, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s %v", method, resp.StatusCode, b, err)
		}
		return string(b)
	}
	if got := call("Acquire", `{"key":"o/k","owner":"alice","ttlMs":10000}`); !strings.Contains(got, `"leaseId"`) {
		t.Fatalf("Acquire answer %s lacks the holder's leaseId", got)
	}
	for method, body := range map[string]string{"Get": `{"key":"o/k"}`, "List": `{"prefix":"o/"}`} {
		got := call(method, body)
		if !strings.Contains(got, `"owner"`) || strings.Contains(got, `"leaseId"`) {
			t.Errorf("%s answer %s: want the lease without a leaseId member", method, got)
		}
	}
}
