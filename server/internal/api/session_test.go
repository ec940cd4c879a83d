package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/streamwrite"
)

// serveLeaseAPI serves the lease API of d over HTTP/1.1 and h2c, with the
// stream control the node gives its streams, and returns an h2c client.
func serveLeaseAPI(t *testing.T, d *Deps) fencedv1connect.LeaseServiceClient {
	t.Helper()
	_, h := fencedv1connect.NewLeaseServiceHandler(LeaseService(d))
	srv := httptest.NewUnstartedServer(streamwrite.Wrap(h, func(*http.Request) bool { return true }, 0, nil))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: protocols}
	t.Cleanup(tr.CloseIdleConnections)
	return fencedv1connect.NewLeaseServiceClient(&http.Client{Transport: tr}, srv.URL)
}

// testSession is an open Session stream; answers that arrive before
// they are asked for are kept by id.
type testSession struct {
	t       testing.TB
	stream  *connect.BidiStreamForClient[fencedv1.SessionRequest, fencedv1.SessionResponse]
	arrived map[uint64]*fencedv1.SessionResponse
}

func openSession(t testing.TB, c fencedv1connect.LeaseServiceClient) *testSession {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	st := c.Session(ctx)
	t.Cleanup(func() { st.CloseRequest(); st.CloseResponse() })
	return &testSession{t: t, stream: st, arrived: map[uint64]*fencedv1.SessionResponse{}}
}

func (s *testSession) send(req *fencedv1.SessionRequest) {
	s.t.Helper()
	if err := s.stream.Send(req); err != nil {
		s.t.Fatalf("send call %d: %v", req.GetId(), err)
	}
}

// next is the next answer to arrive.
func (s *testSession) next() *fencedv1.SessionResponse {
	s.t.Helper()
	resp, err := s.stream.Receive()
	if err != nil {
		s.t.Fatalf("receive: %v", err)
	}
	return resp
}

// answer is the answer to call id, reading on until it arrives.
func (s *testSession) answer(id uint64) *fencedv1.SessionResponse {
	s.t.Helper()
	for {
		if resp, ok := s.arrived[id]; ok {
			delete(s.arrived, id)
			return resp
		}
		resp := s.next()
		if _, dup := s.arrived[resp.GetId()]; dup {
			s.t.Fatalf("two answers to call %d", resp.GetId())
		}
		s.arrived[resp.GetId()] = resp
	}
}

// call sends req and returns its answer.
func (s *testSession) call(req *fencedv1.SessionRequest) *fencedv1.SessionResponse {
	s.t.Helper()
	s.send(req)
	return s.answer(req.GetId())
}

func acquireCall(id uint64, key string, waitMs int64) *fencedv1.SessionRequest {
	return &fencedv1.SessionRequest{Id: id, Call: &fencedv1.SessionRequest_Acquire{
		Acquire: &fencedv1.AcquireRequest{Key: key, Owner: "B", TtlMs: 5000, WaitMs: waitMs}}}
}

func renewCall(id uint64, key, leaseID string) *fencedv1.SessionRequest {
	return &fencedv1.SessionRequest{Id: id, Call: &fencedv1.SessionRequest_Renew{
		Renew: &fencedv1.RenewRequest{Key: key, LeaseId: leaseID}}}
}

func releaseCall(id uint64, key, leaseID string) *fencedv1.SessionRequest {
	return &fencedv1.SessionRequest{Id: id, Call: &fencedv1.SessionRequest_Release{
		Release: &fencedv1.ReleaseRequest{Key: key, LeaseId: leaseID}}}
}

func cancelCall(id uint64) *fencedv1.SessionRequest {
	return &fencedv1.SessionRequest{Id: id, Call: &fencedv1.SessionRequest_Cancel{Cancel: &fencedv1.SessionCancel{}}}
}

// followerNode is a fakeNode that does not lead: it forwards every call
// to leader.
type followerNode struct {
	*fakeNode
	leader fencedv1connect.LeaseServiceClient
}

func (n *followerNode) Ready() bool   { return false }
func (n *followerNode) Leading() bool { return false }
func (n *followerNode) LeaseLeader(context.Context) (fencedv1connect.LeaseServiceClient, error) {
	return n.leader, nil
}

// A follower's session serves each call at the leader, as the unary call
// would be: the grant, the renewal and the release are the leader's, and
// so are its refusals with their details.
func TestSessionCallsAreForwardedToTheLeader(t *testing.T) {
	leader := newFakeNode("held")
	follower := &followerNode{fakeNode: newFakeNode(), leader: serveLeaseAPI(t, leader.deps())}
	d := follower.deps()
	d.Leader, d.Forward = follower, follower
	s := openSession(t, serveLeaseAPI(t, d))

	granted := s.call(acquireCall(1, "k", 0)).GetAcquire().GetLease()
	if granted.GetLeaseId() != "id-k" || granted.GetToken() != 100 {
		t.Fatalf("acquisition through the follower: %v, want the leader's grant", granted)
	}
	if _, ok, _, _ := leader.Get("k"); !ok {
		t.Fatal("the leader does not hold the grant")
	}
	if _, ok, _, _ := follower.fakeNode.Get("k"); ok {
		t.Fatal("the follower granted the key itself")
	}
	if r := s.call(renewCall(2, "k", "id-k")).GetRenew().GetLease(); r.GetToken() != 100 {
		t.Fatalf("renewal through the follower: %v", r)
	}
	held := s.call(acquireCall(3, "held", 0)).GetError()
	if held.GetCode() != "failed_precondition" || held.GetHeld().GetOwner() != "A" || held.GetHeld().GetToken() != 1 {
		t.Fatalf("acquisition of a held key through the follower: %v, want failed_precondition naming A's token 1", held)
	}
	if e := s.call(releaseCall(4, "k", "stale")).GetError(); e.GetCode() != "not_found" {
		t.Fatalf("release of a stale lease: %v, want not_found", e)
	}
	if s.call(releaseCall(5, "k", "id-k")).GetRelease() == nil {
		t.Fatal("release through the follower failed")
	}
	if _, ok, _, _ := leader.Get("k"); ok {
		t.Fatal("the leader still holds the released key")
	}
	leader.mu.Lock()
	defer leader.mu.Unlock()
	if leader.counts["acquisition"] != 2 || leader.counts["renewal"] != 1 || leader.counts["release"] != 2 {
		t.Errorf("the leader counted %v, want 2 acquisitions, 1 renewal, 2 releases", leader.counts)
	}
	follower.mu.Lock()
	defer follower.mu.Unlock()
	if follower.counts["observed Acquire"] != 2 || follower.counts["observed Release"] != 2 {
		t.Errorf("the follower observed %v, want its 2 Acquire and 2 Release calls", follower.counts)
	}
}

// grantingNode grants acquisitions only once their context has ended:
// the grant was being written when the call was cancelled.
type grantingNode struct {
	*fakeNode
	entered chan struct{}
}

func (n *grantingNode) Acquire(ctx context.Context, key, owner string, ttl, wait time.Duration) (lease.Lease, error) {
	close(n.entered)
	<-ctx.Done()
	return n.fakeNode.Acquire(context.Background(), key, owner, ttl, wait)
}

// A cancel that comes too late to stop the call's grant gets the grant as
// the call's one answer: the client learns that it holds the key.
func TestSessionCancelledCallThatWasGrantedReportsTheGrant(t *testing.T) {
	n := &grantingNode{fakeNode: newFakeNode(), entered: make(chan struct{})}
	d := n.deps()
	d.Leases = n
	s := openSession(t, serveLeaseAPI(t, d))
	s.send(acquireCall(7, "k", 0))
	<-n.entered
	s.send(cancelCall(7))
	if l := s.answer(7).GetAcquire().GetLease(); l.GetLeaseId() != "id-k" {
		t.Fatalf("answer to a cancelled call that was granted: %v, want the grant", l)
	}
	// One answer per call: the next answer is the next call's.
	if resp := s.call(renewCall(8, "k", "id-k")); resp.GetRenew() == nil {
		t.Fatalf("renewal after the cancel: %v", resp)
	}
}
