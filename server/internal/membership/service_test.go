package membership

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/server/internal/apierr"
	"github.com/fencedio/fenced/server/internal/peers"
)

// fakePeers answers Status from statuses and records admissions.
type fakePeers struct {
	*statuses
	mu       sync.Mutex
	admitted []string
}

func (p *fakePeers) AdmitPeer(ctx context.Context, addr, node string) (peers.Hello, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.admitted = append(p.admitted, node+"@"+addr)
	return peers.Hello{Node: node, Votes: true}, nil
}

// fakeForwarding forwards to leader, if set, naming this node on the
// header "Test-Named".
type fakeForwarding struct {
	leader fencedv1connect.ClusterServiceClient
	err    error
}

func (f fakeForwarding) Leader(ctx context.Context, h http.Header, here bool) (fencedv1connect.ClusterServiceClient, error) {
	if here {
		return nil, nil
	}
	return f.leader, f.err
}

func (f fakeForwarding) Name(ctx context.Context, h http.Header) { h.Set("Test-Named", "n9") }

func (f fakeForwarding) Unreached(ctx context.Context, err error) error { return err }

func newService(n *testNode, p Prober, f Forwarding) *Service {
	return &Service{Raft: n.raft, NodeID: n.id, Peers: p, Forward: f, Log: quiet,
		ClientURLs: func() map[string]string { return map[string]string{"n1": "http://n1.example:7420"} }}
}

func code(err error) connect.Code { return connect.CodeOf(err) }

func TestServiceListMembers(t *testing.T) {
	n := newLeader(t, "n1")
	a := newService(n, nil, fakeForwarding{})
	resp, err := a.ListMembers(context.Background(), connect.NewRequest(&fencedv1.ListMembersRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	ms := resp.Msg.GetMembers()
	if resp.Msg.GetLeaderId() != "n1" || resp.Msg.GetTerm() == 0 || len(ms) != 1 {
		t.Fatalf("ListMembers: %v", resp.Msg)
	}
	if m := ms[0]; m.GetId() != "n1" || m.GetAddress() != string(n.addr) || !m.GetVoter() || !m.GetLeader() || m.GetClientUrl() != "http://n1.example:7420" {
		t.Errorf("member %v", m)
	}
}

func TestServiceAddRemoveMember(t *testing.T) {
	ctx := context.Background()
	n := newLeader(t, "n1")
	p := &fakePeers{statuses: newStatuses()}
	a := newService(n, p, fakeForwarding{})
	add := func(id, addr string, nonVoter bool) error {
		_, err := a.AddMember(ctx, connect.NewRequest(&fencedv1.AddMemberRequest{Id: id, Address: addr, NonVoter: nonVoter}))
		return err
	}
	for _, bad := range [][2]string{{"", "127.0.0.1:7423"}, {"n\x002", "127.0.0.1:7423"}, {"n2", "127.0.0.1"}, {"n2", "0.0.0.0:7423"}, {"n2", ":7423"}, {"n2", "h:0"}} {
		if err := add(bad[0], bad[1], false); code(err) != connect.CodeInvalidArgument {
			t.Errorf("add %q at %q: %v", bad[0], bad[1], err)
		}
	}
	if err := add("n2", "127.0.0.1:7423", true); code(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "start it first with fenced --join --node-id n2") {
		t.Errorf("add a node that does not answer: %v", err)
	}
	p.set("127.0.0.1:7423", peers.Hello{Node: "n3"})
	if err := add("n2", "127.0.0.1:7423", true); code(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), `the node at 127.0.0.1:7423 is "n3"`) {
		t.Errorf("add another node: %v", err)
	}
	p.set("127.0.0.1:7423", peers.Hello{Node: "n2"})
	if err := add("n2", "127.0.0.1:7423", true); err != nil {
		t.Fatal(err)
	}
	if len(p.admitted) != 1 || p.admitted[0] != "n2@127.0.0.1:7423" {
		t.Errorf("admitted %v", p.admitted)
	}
	if s := n.servers(t)["n2"]; s.Address != "127.0.0.1:7423" || s.Suffrage.String() != "Nonvoter" {
		t.Errorf("n2 in the configuration: %+v", s)
	}
	// n2 started on a new data directory since: refused until removed.
	if err := add("n2", "127.0.0.1:7423", true); code(err) != connect.CodeFailedPrecondition || !errors.Is(err, apierr.ErrMemberNotAddable) || !strings.Contains(err.Error(), "Remove it first") {
		t.Errorf("add a member that lost its data directory: %v", err)
	}
	// A member that says it votes but holds no raft state lost its log: it
	// is not taken for a member of this cluster.
	p.set("127.0.0.1:7425", peers.Hello{Node: "n2", Votes: true})
	if err := add("n2", "127.0.0.1:7425", true); !errors.Is(err, apierr.ErrMemberNotAddable) || !strings.Contains(err.Error(), "holds no raft state") {
		t.Errorf("add a voting member without raft state: %v", err)
	}
	// A member that votes: a change of address, no admission.
	p.set("127.0.0.1:7425", peers.Hello{Node: "n2", Votes: true, HasState: true})
	if err := add("n2", "127.0.0.1:7425", true); err != nil {
		t.Fatal(err)
	}
	if len(p.admitted) != 1 || n.servers(t)["n2"].Address != "127.0.0.1:7425" {
		t.Errorf("admitted %v, configuration %v", p.admitted, n.servers(t))
	}
	p.set("127.0.0.1:7425", peers.Hello{}) // a mismatch answers so
	remove := func(id string) error {
		_, err := a.RemoveMember(ctx, connect.NewRequest(&fencedv1.RemoveMemberRequest{Id: id}))
		return err
	}
	if err := remove(""); code(err) != connect.CodeInvalidArgument {
		t.Errorf("remove no one: %v", err)
	}
	if err := remove("n2"); err != nil {
		t.Fatal(err)
	}
	if err := remove("n2"); code(err) != connect.CodeNotFound || !errors.Is(err, apierr.ErrUnknownMember) {
		t.Errorf("remove a removed member: %v", err)
	}
	if _, in := n.servers(t)["n2"]; in {
		t.Error("n2 still in the configuration")
	}
}

func TestServiceAddMemberClusterMismatch(t *testing.T) {
	n := newLeader(t, "n1")
	a := newService(n, mismatched{}, fakeForwarding{})
	_, err := a.AddMember(context.Background(), connect.NewRequest(&fencedv1.AddMemberRequest{Id: "n2", Address: "127.0.0.1:7423"}))
	if code(err) != connect.CodeFailedPrecondition || !errors.Is(err, peers.ErrClusterMismatch) {
		t.Errorf("add a member of another cluster: %v", err)
	}
}

type mismatched struct{ Prober }

func (mismatched) Status(ctx context.Context, addr string) (peers.Hello, error) {
	return peers.Hello{}, &peers.ClusterMismatchError{Peer: "n2", Cluster: "a", PeerCluster: "b"}
}

func TestServiceTransferLeadership(t *testing.T) {
	ctx := context.Background()
	n := newLeader(t, "n1")
	a := newService(n, nil, fakeForwarding{})
	resp, err := a.TransferLeadership(ctx, connect.NewRequest(&fencedv1.TransferLeadershipRequest{Id: "n1"}))
	if err != nil || resp.Msg.GetLeaderId() != "n1" {
		t.Errorf("transfer to itself: %v %v", resp, err)
	}
	if _, err := a.TransferLeadership(ctx, connect.NewRequest(&fencedv1.TransferLeadershipRequest{Id: "n7"})); code(err) != connect.CodeNotFound {
		t.Errorf("transfer to no member: %v", err)
	}
}

// A node that does not lead forwards changes to the leader, named, and
// hands back its answer.
func TestServiceForwards(t *testing.T) {
	ctx := context.Background()
	leader := newLeader(t, "n1")
	var named []string
	path, h := fencedv1connect.NewClusterServiceHandler(newService(leader, nil, fakeForwarding{}))
	mux := http.NewServeMux()
	mux.Handle(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		named = append(named, r.Header.Get("Test-Named"))
		h.ServeHTTP(w, r)
	}))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	client := fencedv1connect.NewClusterServiceClient(srv.Client(), srv.URL)

	follower := newTestNode(t, "n2") // never bootstrapped: no leader
	a := newService(follower, nil, fakeForwarding{leader: client})
	if _, err := a.RemoveMember(ctx, connect.NewRequest(&fencedv1.RemoveMemberRequest{Id: "n7"})); code(err) != connect.CodeNotFound {
		t.Errorf("forwarded remove of no member: %v", err)
	}
	if resp, err := a.TransferLeadership(ctx, connect.NewRequest(&fencedv1.TransferLeadershipRequest{Id: "n1"})); err != nil || resp.Msg.GetLeaderId() != "n1" {
		t.Errorf("forwarded transfer: %v %v", resp, err)
	}
	if _, err := a.AddMember(ctx, connect.NewRequest(&fencedv1.AddMemberRequest{Id: "n1", Address: "0.0.0.0:1"})); code(err) != connect.CodeInvalidArgument {
		t.Errorf("invalid add, checked before forwarding: %v", err)
	}
	if len(named) != 2 || named[0] != "n9" || named[1] != "n9" {
		t.Errorf("forwarded calls named %q", named)
	}
	refused := connect.NewError(connect.CodeUnavailable, errors.New("no leader"))
	a.Forward = fakeForwarding{err: refused}
	if _, err := a.RemoveMember(ctx, connect.NewRequest(&fencedv1.RemoveMemberRequest{Id: "n1"})); !errors.Is(err, refused) {
		t.Errorf("no leader to forward to: %v", err)
	}
}
