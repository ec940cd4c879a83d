package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/server/internal/admission"
)

// leaseClientFrom is a lease API client whose connections come from the
// loopback address ip.
func leaseClientFrom(t *testing.T, base, ip string) fencedv1connect.LeaseServiceClient {
	return fencedv1connect.NewLeaseServiceClient(clientFrom(t, ip), base)
}

// limitRefusals is fenced_limit_refusals_total{limit=limit} as s's
// /metrics serves it.
func limitRefusals(t *testing.T, s *Server, limit string) float64 {
	t.Helper()
	families, err := s.cfg.Gatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "fenced_limit_refusals_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "limit" && l.GetValue() == limit {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("fenced_limit_refusals_total{limit=%q} not served", limit)
	return 0
}

// waitFor starts an acquisition from c that waits in line for key, held by
// someone else, and returns once it waits or was refused.
func waitFor(t *testing.T, s *Server, c fencedv1connect.LeaseServiceClient, key, owner string) error {
	t.Helper()
	before := s.waiters.Len()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: key, Owner: owner, TtlMs: 60_000, WaitMs: 60_000}))
		errc <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for s.waiters.Len() == before {
		select {
		case err := <-errc:
			return err
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("acquisition of %s by %s neither waits nor ends", key, owner)
		}
		time.Sleep(time.Millisecond) // polling the queue's length: it has no signal
	}
	return nil
}

// One client address takes at most MaxWaitersPerClient waiters, whatever
// owners it names, and the server at most MaxWaiters; both refuse with
// resource_exhausted naming the limit, and are counted.
func TestWaiterLimits(t *testing.T) {
	s := newTestServer(t, Config{MaxWaiters: 3, MaxWaitersPerClient: 2})
	base := serveTest(t, s)
	if _, err := leaseClientFrom(t, base, "127.0.0.1").Acquire(context.Background(),
		connect.NewRequest(&fencedv1.AcquireRequest{Key: "k", Owner: "holder", TtlMs: 60_000})); err != nil {
		t.Fatal(err)
	}
	abuser := leaseClientFrom(t, base, "127.0.0.2")
	for i := range 2 {
		if err := waitFor(t, s, abuser, "k", fmt.Sprint("o", i)); err != nil {
			t.Fatalf("waiter %d within the limits: %v", i, err)
		}
	}
	err := waitFor(t, s, abuser, "k", "o2")
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "max-waiters-per-client") {
		t.Fatalf("third waiter from one address: %v, want resource_exhausted naming max-waiters-per-client", err)
	}
	if err := waitFor(t, s, leaseClientFrom(t, base, "127.0.0.3"), "k", "p"); err != nil {
		t.Fatalf("a waiter from another address: %v", err)
	}
	err = waitFor(t, s, leaseClientFrom(t, base, "127.0.0.4"), "k", "q")
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "max-waiters") {
		t.Fatalf("fourth waiter: %v, want resource_exhausted naming max-waiters", err)
	}
	for limit, want := range map[string]float64{"max-waiters-per-client": 1, "max-waiters": 1} {
		if got := limitRefusals(t, s, limit); got != want {
			t.Errorf("fenced_limit_refusals_total{limit=%q} = %v, want %v", limit, got, want)
		}
	}
}

// One client address holds at most MaxLeasesPerClient leases, whatever
// owners it names; a lease that ends gives its place back, and a client
// cannot claim another address with the forwarding header.
func TestLeasesPerClient(t *testing.T) {
	s := newTestServer(t, Config{MaxLeasesPerClient: 2})
	base := serveTest(t, s)
	abuser := leaseClientFrom(t, base, "127.0.0.2")
	acquire := func(c fencedv1connect.LeaseServiceClient, key string, header ...string) (*fencedv1.Lease, error) {
		req := connect.NewRequest(&fencedv1.AcquireRequest{Key: key, Owner: "owner-" + key, TtlMs: 60_000})
		if len(header) == 2 {
			req.Header().Set(header[0], header[1])
		}
		resp, err := c.Acquire(context.Background(), req)
		if err != nil {
			return nil, err
		}
		return resp.Msg.GetLease(), nil
	}
	first, err := acquire(abuser, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acquire(abuser, "b"); err != nil {
		t.Fatal(err)
	}
	for _, hdr := range [][]string{nil, {admission.ForwardedClientHeader, "127.0.0.9"}} {
		_, err = acquire(abuser, "c", hdr...)
		if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "max-leases-per-client") {
			t.Fatalf("third lease from one address (headers %q): %v, want resource_exhausted naming max-leases-per-client", hdr, err)
		}
	}
	if _, err := acquire(leaseClientFrom(t, base, "127.0.0.3"), "c"); err != nil {
		t.Fatalf("a lease for another address: %v", err)
	}
	if _, err := abuser.Release(context.Background(), connect.NewRequest(&fencedv1.ReleaseRequest{Key: "a", LeaseId: first.GetLeaseId()})); err != nil {
		t.Fatal(err)
	}
	if _, err := acquire(abuser, "d"); err != nil {
		t.Fatalf("a lease once one of the address's ended: %v", err)
	}
	if got := limitRefusals(t, s, "max-leases-per-client"); got != 2 {
		t.Errorf("fenced_limit_refusals_total{limit=max-leases-per-client} = %v, want 2", got)
	}
}
