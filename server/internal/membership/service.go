package membership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/server/internal/apierr"
	"github.com/fencedio/fenced/server/internal/peers"
	"github.com/hashicorp/raft"
)

// membershipTimeout bounds how long a membership change may wait to be
// accepted by raft (another change in progress).
const membershipTimeout = 10 * time.Second

// Prober asks the nodes at raft addresses over the peer port
// (peers.Mux).
type Prober interface {
	// Status asks the node at address who it is.
	Status(ctx context.Context, address string) (peers.Hello, error)
	// AdmitPeer makes the member node waiting at address a voting member
	// of this node's cluster, and returns what it says of itself then.
	AdmitPeer(ctx context.Context, address, node string) (peers.Hello, error)
}

// Forwarding reaches the leader's ClusterService for the calls a node
// that does not lead forwards.
type Forwarding interface {
	// Leader returns a client of the ClusterService of the leader a call
	// with header h goes to, or nil when this node serves it: when here is
	// true, or when it leads. A call forwarded once is never forwarded
	// again.
	Leader(ctx context.Context, h http.Header, here bool) (fencedv1connect.ClusterServiceClient, error)
	// Name names this node and, with auth on, the caller of ctx on the
	// headers h of a call forwarded to the leader.
	Name(ctx context.Context, h http.Header)
	// Unreached returns err, the error of a call forwarded to the leader
	// for a caller whose context is ctx, as the caller gets it.
	Unreached(ctx context.Context, err error) error
}

// Service serves ClusterService over raft's configuration. Changes run on
// the leader; any other node forwards them, as it forwards lease calls.
type Service struct {
	Raft    *raft.Raft
	NodeID  string
	Peers   Prober
	Forward Forwarding
	// ClientURLs returns the members' client URLs as the log last
	// recorded them, by member ID.
	ClientURLs func() map[string]string
	// Refused returns the members this node refuses as rolled back, with
	// why (peers.Acks.Refused); nil: none.
	Refused func() map[string]string
	Log     *slog.Logger
}

var _ fencedv1connect.ClusterServiceHandler = (*Service)(nil)

// leader returns a client of the leader's ClusterService, or nil when this
// node should serve the call itself.
func (a *Service) leader(ctx context.Context, h http.Header) (fencedv1connect.ClusterServiceClient, error) {
	return a.Forward.Leader(ctx, h, a.Raft.State() == raft.Leader)
}

// forwarded is the request this node sends the leader for a call whose
// context is ctx.
func forwarded[T any](ctx context.Context, a *Service, msg *T) *connect.Request[T] {
	req := connect.NewRequest(msg)
	a.Forward.Name(ctx, req.Header())
	return req
}

func (a *Service) members() ([]*fencedv1.Member, error) {
	f := a.Raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	_, leader := a.Raft.LeaderWithID()
	urls := a.ClientURLs()
	var refused map[string]string
	if a.Refused != nil {
		refused = a.Refused()
	}
	var out []*fencedv1.Member
	for _, srv := range f.Configuration().Servers {
		out = append(out, &fencedv1.Member{Id: string(srv.ID), Address: string(srv.Address),
			Voter: srv.Suffrage == raft.Voter, Leader: srv.ID == leader, ClientUrl: urls[string(srv.ID)],
			Refused: refused[string(srv.ID)]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Id < out[j].Id })
	return out, nil
}

func (a *Service) ListMembers(context.Context, *connect.Request[fencedv1.ListMembersRequest]) (*connect.Response[fencedv1.ListMembersResponse], error) {
	ms, err := a.members()
	if err != nil {
		return nil, apierr.Connect(err)
	}
	_, leader := a.Raft.LeaderWithID()
	return connect.NewResponse(&fencedv1.ListMembersResponse{Members: ms, LeaderId: string(leader), Term: a.Raft.CurrentTerm()}), nil
}

func (a *Service) AddMember(ctx context.Context, req *connect.Request[fencedv1.AddMemberRequest]) (*connect.Response[fencedv1.AddMemberResponse], error) {
	id, addr := req.Msg.GetId(), req.Msg.GetAddress()
	if err := validateMember(id, addr); err != nil {
		return nil, apierr.Connect(err)
	}
	rpc, err := a.leader(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	if rpc != nil {
		resp, err := rpc.AddMember(ctx, forwarded(ctx, a, req.Msg))
		return resp, a.Forward.Unreached(ctx, err)
	}
	if err := a.admit(ctx, id, addr); err != nil {
		return nil, apierr.Connect(err)
	}
	add := a.Raft.AddVoter
	if req.Msg.GetNonVoter() {
		add = a.Raft.AddNonvoter
	}
	if err := add(raft.ServerID(id), raft.ServerAddress(addr), 0, membershipTimeout).Error(); err != nil {
		return nil, apierr.Connect(fmt.Errorf("add member %s: %w", id, err))
	}
	a.Log.Info("member added", "member", id, "address", addr, "voter", !req.Msg.GetNonVoter())
	ms, err := a.members()
	if err != nil {
		return nil, apierr.Connect(err)
	}
	return connect.NewResponse(&fencedv1.AddMemberResponse{Members: ms}), nil
}

func (a *Service) RemoveMember(ctx context.Context, req *connect.Request[fencedv1.RemoveMemberRequest]) (*connect.Response[fencedv1.RemoveMemberResponse], error) {
	id := req.Msg.GetId()
	if id == "" {
		return nil, apierr.Connect(apierr.Invalidf("id is required"))
	}
	rpc, err := a.leader(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	if rpc != nil {
		resp, err := rpc.RemoveMember(ctx, forwarded(ctx, a, req.Msg))
		return resp, a.Forward.Unreached(ctx, err)
	}
	if _, ok := a.member(id); !ok {
		return nil, apierr.Connect(fmt.Errorf("remove member %q: %w", id, apierr.ErrUnknownMember))
	}
	if err := a.Raft.RemoveServer(raft.ServerID(id), 0, membershipTimeout).Error(); err != nil {
		return nil, apierr.Connect(fmt.Errorf("remove member %s: %w", id, err))
	}
	a.Log.Info("member removed", "member", id)
	ms, err := a.members()
	if err != nil {
		return nil, apierr.Connect(err)
	}
	return connect.NewResponse(&fencedv1.RemoveMemberResponse{Members: ms}), nil
}

func (a *Service) TransferLeadership(ctx context.Context, req *connect.Request[fencedv1.TransferLeadershipRequest]) (*connect.Response[fencedv1.TransferLeadershipResponse], error) {
	rpc, err := a.leader(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	if rpc != nil {
		resp, err := rpc.TransferLeadership(ctx, forwarded(ctx, a, req.Msg))
		return resp, a.Forward.Unreached(ctx, err)
	}
	var f raft.Future
	if id := req.Msg.GetId(); id != "" {
		m, ok := a.member(id)
		if !ok {
			return nil, apierr.Connect(fmt.Errorf("transfer leadership to %q: %w", id, apierr.ErrUnknownMember))
		}
		if id == a.NodeID {
			return connect.NewResponse(&fencedv1.TransferLeadershipResponse{LeaderId: id}), nil
		}
		f = a.Raft.LeadershipTransferToServer(m.ID, m.Address)
	} else {
		f = a.Raft.LeadershipTransfer()
	}
	if err := f.Error(); err != nil {
		return nil, apierr.Connect(fmt.Errorf("transfer leadership: %w", err))
	}
	// The transfer is done when another node leads; wait until this one
	// knows which.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, leader := a.Raft.LeaderWithID(); leader != "" && string(leader) != a.NodeID {
			a.Log.Info("leadership transferred", "leader", leader)
			return connect.NewResponse(&fencedv1.TransferLeadershipResponse{LeaderId: string(leader)}), nil
		}
		select {
		case <-ctx.Done():
			return nil, apierr.Connect(ctx.Err())
		case <-tick.C:
		}
	}
}

// admit asks the node at addr who it is and, if it waits to be added,
// makes it a voting member of this cluster (internal/peers/identity.go) before raft adds
// it. A member still in the configuration whose node started on a new
// data directory is refused: it must be removed first, so that no
// configuration counts its lost votes.
func (a *Service) admit(ctx context.Context, id, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, peers.HandshakeTimeout)
	defer cancel()
	st, err := a.Peers.Status(ctx, addr)
	if err != nil {
		if errors.Is(err, peers.ErrClusterMismatch) {
			return fmt.Errorf("add member %s: %w", id, err)
		}
		return fmt.Errorf("add member %s: %w: no answer at %s (%v); start it first with fenced --join --node-id %s", id, apierr.ErrMemberNotAddable, addr, err, id)
	}
	if st.Node != id {
		return fmt.Errorf("add member %s: %w: the node at %s is %q", id, apierr.ErrMemberNotAddable, addr, st.Node)
	}
	if st.Votes && !st.HasState {
		return fmt.Errorf("add member %s: %w: the node at %s says it votes but holds no raft state: its log was lost. "+
			"Remove it (fencectl member remove %s), empty its data directory, start it with --join, then add it", id, apierr.ErrMemberNotAddable, addr, id)
	}
	if st.Votes {
		return nil // a member of this cluster: a change of suffrage or address
	}
	if _, in := a.member(id); in {
		return fmt.Errorf("add member %s: %w: %s is in the configuration, and the node at %s started on a new data directory since: "+
			"its votes and log were lost. Remove it first (fencectl member remove %s), then add it", id, apierr.ErrMemberNotAddable, id, addr, id)
	}
	if _, err := a.Peers.AdmitPeer(ctx, addr, id); err != nil {
		return fmt.Errorf("add member %s: %w: %v", id, apierr.ErrMemberNotAddable, err)
	}
	return nil
}

func (a *Service) member(id string) (raft.Server, bool) {
	f := a.Raft.GetConfiguration()
	if f.Error() != nil {
		return raft.Server{}, false
	}
	for _, srv := range f.Configuration().Servers {
		if string(srv.ID) == id {
			return srv, true
		}
	}
	return raft.Server{}, false
}

func validateMember(id, addr string) error {
	if id == "" {
		return apierr.Invalidf("id is required")
	}
	if err := apierr.ValidateText("id", id); err != nil {
		return err
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return apierr.Invalidf("address %q: %v", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || port == "0" || (ip != nil && ip.IsUnspecified()) {
		return apierr.Invalidf("address %q: peers cannot dial it", addr)
	}
	return nil
}
