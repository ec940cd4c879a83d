package server

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/internal/testutil"
)

// Every answer of the lease API and ClusterService names the node's
// cluster: grants, refusals, streams; a node of no cluster names none.
func TestClusterIDHeader(t *testing.T) {
	s := newTestServer(t, Config{})
	id := s.Role().ClusterID
	if id == "" {
		t.Fatal("a cluster of one has no cluster ID")
	}
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	check := func(what string, h http.Header) {
		t.Helper()
		if got := h.Get(ClusterIDHeader); got != id {
			t.Errorf("%s: %s %q, want %q", what, ClusterIDHeader, got, id)
		}
	}
	lc := fencedv1connect.NewLeaseServiceClient(http.DefaultClient, ts.URL)
	acq, err := lc.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "cid/a", Owner: "o", TtlMs: 5000}))
	if err != nil {
		t.Fatal(err)
	}
	check("acquire", acq.Header())
	if _, err := lc.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "cid/b", Owner: "o", TtlMs: 5000})); err != nil {
		t.Fatal(err)
	}
	// Replays cid/b's acquisition (or resyncs): a message to read.
	watch, err := lc.Watch(ctx, connect.NewRequest(&fencedv1.WatchRequest{Prefix: "cid/", AfterRevision: 1}))
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	if !watch.Receive() {
		t.Fatalf("watch: %v", watch.Err())
	}
	check("watch", watch.ResponseHeader())
	_, err = lc.Renew(ctx, connect.NewRequest(&fencedv1.RenewRequest{Key: "cid/a", LeaseId: "00"}))
	if ce := new(connect.Error); !errors.As(err, &ce) {
		t.Fatalf("renew of an unknown lease: %v", err)
	} else {
		check("refused renew", ce.Meta())
	}
	members, err := fencedv1connect.NewClusterServiceClient(http.DefaultClient, ts.URL).
		ListMembers(ctx, connect.NewRequest(&fencedv1.ListMembersRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	check("list members", members.Header())

	// A node waiting to be added belongs to no cluster yet.
	self, other := testutil.MustFreeAddr(t), testutil.MustFreeAddr(t)
	waiting, err := New(identityConfig(t, t.TempDir(), Config{NodeID: "n2", InitialClusterState: ClusterExisting, RaftListen: self,
		InitialCluster: []Peer{{ID: "n1", Address: other}, {ID: "n2", Address: self}}}))
	if err != nil {
		t.Fatal(err)
	}
	defer waiting.Close()
	rec := httptest.NewRecorder()
	waiting.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/role", nil))
	if got, ok := rec.Result().Header[ClusterIDHeader]; ok {
		t.Errorf("a node of no cluster answered %s %q", ClusterIDHeader, got)
	}
}
