package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/server/internal/api"
	"github.com/fencedio/fenced/server/internal/rejections"
)

func rejectionClient(base, token string) fencedv1connect.RejectionServiceClient {
	var rt http.RoundTripper = http.DefaultTransport
	if token != "" {
		rt = bearer{token, rt}
	}
	return fencedv1connect.NewRejectionServiceClient(&http.Client{Transport: rt, Timeout: 10 * time.Second}, base)
}

func report(ctx context.Context, c fencedv1connect.RejectionServiceClient, rs ...*fencedv1.StaleRejection) error {
	_, err := c.ReportRejections(ctx, connect.NewRequest(&fencedv1.ReportRejectionsRequest{Rejections: rs}))
	return err
}

// A bad entry refuses the whole batch: nothing is recorded.
func TestReportRejectionsInvalid(t *testing.T) {
	_, base := serveAPI(t, Config{})
	c := rejectionClient(base, "")
	ctx := context.Background()
	good := &fencedv1.StaleRejection{Scope: "a/1", PresentedToken: 3, HighestToken: 4, Resource: "r"}
	many := make([]*fencedv1.StaleRejection, rejections.MaxReportEntries+1)
	for i := range many {
		many[i] = good
	}
	for name, batch := range map[string][]*fencedv1.StaleRejection{
		"empty scope":           {good, {PresentedToken: 3, HighestToken: 4}},
		"control in scope":      {good, {Scope: "a\x01", PresentedToken: 3, HighestToken: 4}},
		"presented 0":           {good, {Scope: "a/1", HighestToken: 4}},
		"presented not below":   {good, {Scope: "a/1", PresentedToken: 4, HighestToken: 4}},
		"owner too long":        {good, {Scope: "a/1", PresentedToken: 3, HighestToken: 4, Owner: strings.Repeat("o", api.MaxOwnerBytes+1)}},
		"resource too long":     {good, {Scope: "a/1", PresentedToken: 3, HighestToken: 4, Resource: strings.Repeat("r", rejections.MaxResourceBytes+1)}},
		"resource with newline": {good, {Scope: "a/1", PresentedToken: 3, HighestToken: 4, Resource: "r\n"}},
		"too many":              many,
	} {
		if err := report(ctx, c, batch...); codeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("%s: %v, want invalid_argument", name, err)
		}
	}
	list, err := c.ListRejections(ctx, connect.NewRequest(&fencedv1.ListRejectionsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if list.Msg.GetTotal() != 0 || len(list.Msg.GetRejections()) != 0 {
		t.Fatalf("refused batches recorded something: %v", list.Msg)
	}
}

// Reporting needs the report permission on each scope; listing needs read.
func TestReportRejectionsAuth(t *testing.T) {
	const reporterSecret = "rep-0123456789abcdef0123456789abcdef"
	policy := fmt.Sprintf(`{
  "tokens": [{"principal": "alice", "sha256": %q}, {"principal": "ledger", "sha256": %q}],
  "rules": [
    {"principal": "alice", "prefix": "a/", "permissions": ["acquire", "renew", "read", "watch"]},
    {"principal": "ledger", "prefix": "a/", "permissions": ["report"]}
  ]
}`, HashSecret(aliceSecret), HashSecret(reporterSecret))
	_, base := serveAPI(t, Config{AuthFile: writePolicy(t, policy)})
	ctx := context.Background()
	alice, ledger, anon := rejectionClient(base, aliceSecret), rejectionClient(base, reporterSecret), rejectionClient(base, "")
	in := func(scope string) *fencedv1.StaleRejection {
		return &fencedv1.StaleRejection{Scope: scope, PresentedToken: 3, HighestToken: 4, Resource: "ledger"}
	}
	if err := report(ctx, ledger, in("a/1")); err != nil {
		t.Fatalf("reporter on its prefix: %v", err)
	}
	for name, tc := range map[string]struct {
		c    fencedv1connect.RejectionServiceClient
		rs   []*fencedv1.StaleRejection
		want connect.Code
	}{
		"reporter outside its prefix": {ledger, []*fencedv1.StaleRejection{in("a/2"), in("b/1")}, connect.CodePermissionDenied},
		"holder without report":       {alice, []*fencedv1.StaleRejection{in("a/1")}, connect.CodePermissionDenied},
		"anonymous":                   {anon, []*fencedv1.StaleRejection{in("a/1")}, connect.CodeUnauthenticated},
	} {
		if err := report(ctx, tc.c, tc.rs...); codeOf(err) != tc.want {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	if _, err := ledger.ListRejections(ctx, connect.NewRequest(&fencedv1.ListRejectionsRequest{Prefix: "a/"})); codeOf(err) != connect.CodePermissionDenied {
		t.Errorf("reporter listing: %v, want permission_denied", err)
	}
	list, err := alice.ListRejections(ctx, connect.NewRequest(&fencedv1.ListRejectionsRequest{Prefix: "a/"}))
	if err != nil {
		t.Fatal(err)
	}
	if list.Msg.GetTotal() != 1 || len(list.Msg.GetRejections()) != 1 || list.Msg.GetRejections()[0].GetScope() != "a/1" {
		t.Fatalf("alice's list: %v (the denied batch must record nothing)", list.Msg)
	}
}

// Watchers that did not ask for rejections never see a REJECTED event;
// those that did see it in order with the transitions.
func TestWatchRejectionsOptIn(t *testing.T) {
	_, base := serveAPI(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	lc := fencedv1connect.NewLeaseServiceClient(http.DefaultClient, base)
	open := func(rejections bool) *connect.ServerStreamForClient[fencedv1.WatchResponse] {
		// From revision 1: the first transition is replayed if it came
		// before the subscription.
		st, err := lc.Watch(ctx, connect.NewRequest(&fencedv1.WatchRequest{Prefix: "jobs/", AfterRevision: 1, Rejections: rejections}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	acquire := func(key, owner string) *fencedv1.Lease {
		r, err := lc.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: key, Owner: owner, TtlMs: 60_000}))
		if err != nil {
			t.Fatal(err)
		}
		return r.Msg.GetLease()
	}
	// Both streams are subscribed once they have seen a first transition.
	first := acquire("jobs/0", "x")
	plain, with := open(false), open(true)
	for _, st := range []*connect.ServerStreamForClient[fencedv1.WatchResponse]{plain, with} {
		if !st.Receive() || st.Msg().GetEvent().GetLease().GetToken() != first.GetToken() {
			t.Fatalf("first event: %v %v", st.Msg(), st.Err())
		}
	}
	if err := report(ctx, rejectionClient(base, ""), &fencedv1.StaleRejection{Scope: "jobs/1", PresentedToken: 1, HighestToken: first.GetToken() + 5, Owner: "worker-A", Resource: "ledger"}); err != nil {
		t.Fatal(err)
	}
	next := acquire("jobs/2", "y")
	if !with.Receive() {
		t.Fatal(with.Err())
	}
	ev := with.Msg().GetEvent()
	if ev.GetType() != fencedv1.Event_REJECTED || ev.GetRejection().GetResource() != "ledger" ||
		ev.GetLease().GetKey() != "jobs/1" || ev.GetLease().GetToken() != 1 || ev.GetLease().GetOwner() != "worker-A" || ev.GetRevision() != first.GetToken() {
		t.Fatalf("opted-in watcher got %v, want the REJECTED event at revision %d (the last transition before it)", ev, first.GetToken())
	}
	for name, st := range map[string]*connect.ServerStreamForClient[fencedv1.WatchResponse]{"plain": plain, "opted-in": with} {
		if !st.Receive() {
			t.Fatal(st.Err())
		}
		if ev := st.Msg().GetEvent(); ev.GetType() != fencedv1.Event_ACQUIRED || ev.GetLease().GetToken() != next.GetToken() {
			t.Fatalf("%s watcher got %v, want the next ACQUIRED", name, ev)
		}
	}
}
