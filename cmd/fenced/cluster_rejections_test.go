package main

import (
	"context"
	"testing"
	"time"

	"github.com/fencedio/fenced/client"
)

// TestClusterRejectionsReachLeader reports a rejection to a follower and
// lists it through the other follower: the leader recorded it, with both
// tokens resolved to their owners.
func TestClusterRejectionsReachLeader(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.waitLeader(20 * time.Second)
	f1, f2 := (leader+1)%3, (leader+2)%3
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	at := func(i int) *client.Client {
		cl, err := client.New(client.Config{Endpoint: c.nodes[i].url})
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	a, err := at(f1).Acquire(ctx, "jobs/1", client.WithOwner("worker-A"))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := at(f2).Acquire(ctx, "jobs/1", client.WithOwner("worker-B"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := at(f1).ReportRejections(ctx, []client.StaleRejection{{Scope: "jobs/1", Presented: a.Token(), Highest: b.Token(), Resource: "ledger", Count: 2}})
	if err != nil || n != 2 {
		t.Fatalf("report to follower %s: %d %v", c.nodes[f1].id, n, err)
	}
	for _, i := range []int{f2, leader} {
		list, total, err := at(i).ListRejections(ctx, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		if total != 2 || len(list) != 1 || list[0].PresentedOwner != "worker-A" || list[0].HighestOwner != "worker-B" || list[0].Count != 2 {
			t.Errorf("list through %s: total %d, %+v", c.nodes[i].id, total, list)
		}
	}
}
