package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/server/internal/api"
	"github.com/fencedio/fenced/server/internal/apierr"
	"github.com/fencedio/fenced/server/internal/peers"
	"github.com/hashicorp/raft"
)

// membershipTimeout bounds how long a membership change may wait to be
// accepted by raft (another change in progress).
const membershipTimeout = 10 * time.Second

// admin serves ClusterService. Changes run on the leader; any other node
// forwards them, as it forwards lease calls.
type admin struct{ s *Server }

var _ fencedv1connect.ClusterServiceHandler = (*admin)(nil)

// leader returns a client of the leader's ClusterService, or nil when this
// node should serve the call itself.
func (a *admin) leader(ctx context.Context, h http.Header) (fencedv1connect.ClusterServiceClient, error) {
	addr, err := a.s.forward.leaderFor(ctx, h, a.s.raft.State() == raft.Leader)
	if err != nil || addr == "" {
		return nil, err
	}
	return a.s.forward.clusterClient(addr), nil
}

func (a *admin) members() ([]*fencedv1.Member, error) {
	f := a.s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	_, leader := a.s.raft.LeaderWithID()
	urls := a.s.fsm.ClientURLs()
	var out []*fencedv1.Member
	for _, srv := range f.Configuration().Servers {
		out = append(out, &fencedv1.Member{Id: string(srv.ID), Address: string(srv.Address),
			Voter: srv.Suffrage == raft.Voter, Leader: srv.ID == leader, ClientUrl: urls[string(srv.ID)]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Id < out[j].Id })
	return out, nil
}

func (a *admin) ListMembers(context.Context, *connect.Request[fencedv1.ListMembersRequest]) (*connect.Response[fencedv1.ListMembersResponse], error) {
	ms, err := a.members()
	if err != nil {
		return nil, apierr.Connect(err)
	}
	_, leader := a.s.raft.LeaderWithID()
	return connect.NewResponse(&fencedv1.ListMembersResponse{Members: ms, LeaderId: string(leader), Term: a.s.raft.CurrentTerm()}), nil
}

func (a *admin) AddMember(ctx context.Context, req *connect.Request[fencedv1.AddMemberRequest]) (*connect.Response[fencedv1.AddMemberResponse], error) {
	id, addr := req.Msg.GetId(), req.Msg.GetAddress()
	if err := validateMember(id, addr); err != nil {
		return nil, apierr.Connect(err)
	}
	rpc, err := a.leader(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	if rpc != nil {
		resp, err := rpc.AddMember(ctx, forwarded(ctx, a.s, req.Msg))
		return resp, unreached(ctx, err)
	}
	if err := a.admit(ctx, id, addr); err != nil {
		return nil, apierr.Connect(err)
	}
	add := a.s.raft.AddVoter
	if req.Msg.GetNonVoter() {
		add = a.s.raft.AddNonvoter
	}
	if err := add(raft.ServerID(id), raft.ServerAddress(addr), 0, membershipTimeout).Error(); err != nil {
		return nil, apierr.Connect(fmt.Errorf("add member %s: %w", id, err))
	}
	a.s.log.Info("member added", "member", id, "address", addr, "voter", !req.Msg.GetNonVoter())
	ms, err := a.members()
	if err != nil {
		return nil, apierr.Connect(err)
	}
	return connect.NewResponse(&fencedv1.AddMemberResponse{Members: ms}), nil
}

func (a *admin) RemoveMember(ctx context.Context, req *connect.Request[fencedv1.RemoveMemberRequest]) (*connect.Response[fencedv1.RemoveMemberResponse], error) {
	id := req.Msg.GetId()
	if id == "" {
		return nil, apierr.Connect(apierr.Invalidf("id is required"))
	}
	rpc, err := a.leader(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	if rpc != nil {
		resp, err := rpc.RemoveMember(ctx, forwarded(ctx, a.s, req.Msg))
		return resp, unreached(ctx, err)
	}
	if _, ok := a.member(id); !ok {
		return nil, apierr.Connect(fmt.Errorf("remove member %q: %w", id, apierr.ErrUnknownMember))
	}
	if err := a.s.raft.RemoveServer(raft.ServerID(id), 0, membershipTimeout).Error(); err != nil {
		return nil, apierr.Connect(fmt.Errorf("remove member %s: %w", id, err))
	}
	a.s.log.Info("member removed", "member", id)
	ms, err := a.members()
	if err != nil {
		return nil, apierr.Connect(err)
	}
	return connect.NewResponse(&fencedv1.RemoveMemberResponse{Members: ms}), nil
}

func (a *admin) TransferLeadership(ctx context.Context, req *connect.Request[fencedv1.TransferLeadershipRequest]) (*connect.Response[fencedv1.TransferLeadershipResponse], error) {
	rpc, err := a.leader(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	if rpc != nil {
		resp, err := rpc.TransferLeadership(ctx, forwarded(ctx, a.s, req.Msg))
		return resp, unreached(ctx, err)
	}
	var f raft.Future
	if id := req.Msg.GetId(); id != "" {
		m, ok := a.member(id)
		if !ok {
			return nil, apierr.Connect(fmt.Errorf("transfer leadership to %q: %w", id, apierr.ErrUnknownMember))
		}
		if id == a.s.cfg.NodeID {
			return connect.NewResponse(&fencedv1.TransferLeadershipResponse{LeaderId: id}), nil
		}
		f = a.s.raft.LeadershipTransferToServer(m.ID, m.Address)
	} else {
		f = a.s.raft.LeadershipTransfer()
	}
	if err := f.Error(); err != nil {
		return nil, apierr.Connect(fmt.Errorf("transfer leadership: %w", err))
	}
	// The transfer is done when another node leads; wait until this one
	// knows which.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, leader := a.s.raft.LeaderWithID(); leader != "" && string(leader) != a.s.cfg.NodeID {
			a.s.log.Info("leadership transferred", "leader", leader)
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
func (a *admin) admit(ctx context.Context, id, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, peers.HandshakeTimeout)
	defer cancel()
	st, err := a.s.peers.Status(ctx, addr)
	if err != nil {
		if errors.Is(err, peers.ErrClusterMismatch) {
			return fmt.Errorf("add member %s: %w", id, err)
		}
		return fmt.Errorf("add member %s: %w: no answer at %s (%v); start it first with fenced --join --node-id %s", id, apierr.ErrMemberNotAddable, addr, err, id)
	}
	if st.Node != id {
		return fmt.Errorf("add member %s: %w: the node at %s is %q", id, apierr.ErrMemberNotAddable, addr, st.Node)
	}
	if st.Votes {
		return nil // a member of this cluster: a change of suffrage or address
	}
	if _, in := a.member(id); in {
		return fmt.Errorf("add member %s: %w: %s is in the configuration, and the node at %s started on a new data directory since: "+
			"its votes and log were lost. Remove it first (fencectl member remove %s), then add it", id, apierr.ErrMemberNotAddable, id, addr, id)
	}
	if _, err := a.s.peers.AdmitPeer(ctx, addr, id); err != nil {
		return fmt.Errorf("add member %s: %w: %v", id, apierr.ErrMemberNotAddable, err)
	}
	return nil
}

func (a *admin) member(id string) (raft.Server, bool) {
	f := a.s.raft.GetConfiguration()
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
	if err := api.ValidateText("id", id); err != nil {
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
