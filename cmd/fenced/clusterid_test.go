package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/server"
)

// TestClusterIDThroughEveryNode checks that every node of a cluster names
// the same cluster, once, in its answers: grants and refusals, served by
// the leader or forwarded to it by a follower.
func TestClusterIDThroughEveryNode(t *testing.T) {
	c := newTestCluster(t, 3)
	c.waitLeader(20 * time.Second)
	r, err := c.role(0)
	if err != nil || r.ClusterID == "" {
		t.Fatalf("role: %+v %v", r, err)
	}
	want := []string{r.ClusterID}
	ctx := context.Background()
	for i, nd := range c.nodes {
		rpc := newClient(nd.url)
		key := fmt.Sprintf("cid/%d", i)
		a, err := rpc.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: key, Owner: "A", TtlMs: 10_000}))
		if err != nil {
			t.Fatalf("acquire via %s: %v", nd.id, err)
		}
		if got := a.Header().Values(server.ClusterIDHeader); !slices.Equal(got, want) {
			t.Errorf("acquire via %s: %s %q, want %q", nd.id, server.ClusterIDHeader, got, want)
		}
		_, err = rpc.Renew(ctx, connect.NewRequest(&fencedv1.RenewRequest{Key: key, LeaseId: "00"}))
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != connect.CodeNotFound {
			t.Fatalf("renew of another lease via %s: %v", nd.id, err)
		}
		if got := ce.Meta().Values(server.ClusterIDHeader); !slices.Equal(got, want) {
			t.Errorf("refused renew via %s: %s %q, want %q", nd.id, server.ClusterIDHeader, got, want)
		}
	}
}
