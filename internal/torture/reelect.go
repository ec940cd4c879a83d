package torture

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"

	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
)

// reelectLeader hands the leadership from the leader to a follower
// (ClusterService TransferLeadership), lets the follower lead for 2/3 to
// 1 TTL, long enough that every held lease is renewed there, and hands it
// back: the same node, the same process, leads again within about a TTL
// of losing it. Its deadlines from its old term are then stale for every
// lease renewed meanwhile, and a node that kept them instead of giving
// every lease a fresh TTL expires those early. A transfer that fails (an
// election in the way) ends the fault early.
func (e *engine) reelectLeader(ctx context.Context, leader int) string {
	old := e.localNodes[leader]
	to := e.follower(leader)
	next := e.localNodes[to]
	start := time.Now()
	if err := e.transferLeadership(ctx, old.Endpoint(), next.Name()); err != nil {
		return fmt.Sprintf("leader-reelect failed: transfer from %s to %s: %v", old.Name(), next.Name(), err)
	}
	if l := e.waitLeader(ctx, e.cfg.TTL); l != to {
		return fmt.Sprintf("leader-reelect failed: after the transfer to %s, the ready leader is node index %d", next.Name(), l)
	}
	served := time.Since(start)
	hold := e.uniform(2*e.cfg.TTL/3, e.cfg.TTL)
	sleepCtx(ctx, hold)
	if err := e.transferLeadership(ctx, next.Endpoint(), old.Name()); err != nil {
		return fmt.Sprintf("leader-reelect failed: transfer back from %s to %s: %v", next.Name(), old.Name(), err)
	}
	back := e.waitLeader(ctx, e.cfg.TTL)
	e.countCluster(func(s *ClusterFaultStats) { s.LeaderReelections++ })
	if back != leader {
		return fmt.Sprintf("leader-reelect: %s led for %v, but the transfer back to %s left node index %d leading", next.Name(), hold.Round(time.Millisecond), old.Name(), back)
	}
	return fmt.Sprintf("leader-reelect: %s handed the leadership to %s (serving after %v), which led for %v and handed it back; %s led again %v after it lost it",
		old.Name(), next.Name(), served.Round(time.Millisecond), hold.Round(time.Millisecond), old.Name(), time.Since(start).Round(time.Millisecond))
}

// transferLeadership asks the node at endpoint to hand the leadership to
// member id, retrying for up to a TTL while the cluster settles.
func (e *engine) transferLeadership(ctx context.Context, endpoint, id string) error {
	c := fencedv1connect.NewClusterServiceClient(http.DefaultClient, endpoint)
	deadline := time.Now().Add(e.cfg.TTL)
	for {
		cctx, cancel := context.WithTimeout(ctx, e.cfg.TTL)
		resp, err := c.TransferLeadership(cctx, connect.NewRequest(&fencedv1.TransferLeadershipRequest{Id: id}))
		cancel()
		if err == nil && resp.Msg.GetLeaderId() == id {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("%s leads instead", resp.Msg.GetLeaderId())
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}
