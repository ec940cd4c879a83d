package forward

import (
	"context"
	"net/http"
	"time"

	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/server/internal/api"
	"github.com/fencedio/fenced/server/internal/apierr"
	"github.com/hashicorp/raft"
)

// Leader returns a client of the leader's API, or nil if this node leads.
// With no leader known it waits for one, up to 2 heartbeat timeouts.
func (f *Forwarder) Leader(ctx context.Context) (fencedv1connect.LeaseServiceClient, error) {
	addr, err := f.LeaderAddr(ctx)
	if err != nil || addr == "" {
		return nil, err
	}
	return f.LeaseClient(addr), nil
}

// LeaderFor returns the raft address of the leader a call with header h
// goes to, or "" when this node serves it: when here is true, or when
// this node leads. A call forwarded once is never forwarded again.
func (f *Forwarder) LeaderFor(ctx context.Context, h http.Header, here bool) (string, error) {
	if here {
		return "", nil
	}
	if h.Get(api.ForwardedHeader) != "" {
		return "", apierr.Connect(apierr.ErrNotReady)
	}
	addr, err := f.LeaderAddr(ctx)
	return addr, apierr.Connect(err)
}

// LeaderAddr returns the leader's raft address, or "" if this node leads.
// With no leader known it waits for one, up to 2 heartbeat timeouts.
func (f *Forwarder) LeaderAddr(ctx context.Context) (string, error) {
	give := time.NewTimer(2 * f.cfg.HeartbeatTimeout)
	defer give.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		addr, self := f.cfg.Leadership.Leader()
		switch {
		case self:
			return "", nil
		case addr != "":
			return addr, nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-f.cfg.Base.Done():
			return "", apierr.ErrNotReady
		case <-give.C:
			return "", apierr.ErrNotReady
		case <-tick.C:
		}
	}
}

// WatchLeader ends forwarded calls on every leader change this node
// observes, until the node's context (Config.Base) ends. The node runs it
// in a goroutine its shutdown waits for.
func (f *Forwarder) WatchLeader() {
	ch := make(chan raft.Observation, 64)
	stop := f.cfg.Leadership.Observe(ch)
	defer stop()
	for {
		select {
		case <-ch:
			f.leaderChanged()
		case <-f.cfg.Base.Done():
			return
		}
	}
}
