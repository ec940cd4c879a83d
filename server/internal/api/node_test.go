package api

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/apierr"
	"github.com/fencedio/fenced/server/internal/security"
	"github.com/fencedio/fenced/server/internal/sharegate"
)

// fakeNode is a leader that serves every call itself, from a map of
// current leases by key, with auth off.
type fakeNode struct {
	mu      sync.Mutex
	leases  map[string]lease.Lease
	batches int                      // calls of RenewBatch
	onBatch func(n int, b []Renewal) // called at the start of RenewBatch n (from 1)
	counts  map[string]int           // by Count method
}

func newFakeNode(keys ...string) *fakeNode {
	n := &fakeNode{leases: map[string]lease.Lease{}, counts: map[string]int{}}
	for i, k := range keys {
		n.leases[k] = lease.Lease{Key: k, ID: fmt.Sprintf("id%d", i), Owner: "A", Token: uint64(i + 1), TTL: time.Minute}
	}
	return n
}

func (n *fakeNode) deps() *Deps {
	return &Deps{Leases: n, Auth: n, State: n, Leader: n, Forward: n, Counts: n,
		Sign:      func(string, uint64) *string { return nil },
		Reads:     sharegate.New(1, 0.5, 0, func() bool { return false }),
		ListLimit: 100}
}

func (n *fakeNode) Acquire(_ context.Context, key, owner string, ttl, _ time.Duration) (lease.Lease, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if l, ok := n.leases[key]; ok {
		return lease.Lease{}, &lease.HeldError{Key: key, Owner: l.Owner, Token: l.Token}
	}
	l := lease.Lease{Key: key, ID: "id-" + key, Owner: owner, Token: 100, TTL: ttl}
	n.leases[key] = l
	return l, nil
}

func (n *fakeNode) RenewBatch(_ context.Context, b []Renewal) {
	n.mu.Lock()
	n.batches++
	nb, on := n.batches, n.onBatch
	n.mu.Unlock()
	if on != nil {
		on(nb, b)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := range b {
		r := &b[i]
		if r.Err != nil {
			continue
		}
		if l, ok := n.leases[r.Key]; ok && l.ID == r.ID {
			r.Lease = l
			continue
		}
		r.Err = apierr.DescribeNotHeld(lease.ErrNotHeld, r.Key, r.ID)
	}
}

func (n *fakeNode) Release(_ context.Context, key, id string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if l, ok := n.leases[key]; !ok || l.ID != id {
		return apierr.DescribeNotHeld(lease.ErrNotHeld, key, id)
	}
	delete(n.leases, key)
	return nil
}

func (n *fakeNode) Revoke(_ context.Context, key, _ string) (lease.Lease, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	l, ok := n.leases[key]
	if !ok {
		return lease.Lease{}, lease.ErrNotHeld
	}
	delete(n.leases, key)
	return l, nil
}

func (n *fakeNode) Authorize(context.Context, security.Permission, string) (security.Principal, error) {
	return security.Anonymous, nil
}

func (n *fakeNode) AuthorizeAcquire(_ context.Context, key, owner string) (string, error) {
	return owner, ValidateKey(key)
}

func (n *fakeNode) AuthorizeRenew(_ context.Context, key, _ string) error { return ValidateKey(key) }

func (n *fakeNode) Get(key string) (lease.Lease, bool, uint64, uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	l, ok := n.leases[key]
	return l, ok, l.Token, 7
}

func (n *fakeNode) List(string, int) ([]lease.Lease, []time.Duration, uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var ls []lease.Lease
	var rem []time.Duration
	for _, l := range n.leases {
		ls, rem = append(ls, l), append(rem, l.TTL)
	}
	return ls, rem, 7
}

func (n *fakeNode) Remaining(string) time.Duration { return time.Second }
func (n *fakeNode) Revision() uint64               { return 7 }

func (n *fakeNode) Ready() bool                       { return true }
func (n *fakeNode) Leading() bool                     { return true }
func (n *fakeNode) AwaitServing(context.Context)      {}
func (n *fakeNode) ConfirmRead(context.Context) error { return nil }
func (n *fakeNode) EverLed() bool                     { return true }
func (n *fakeNode) WhileLeading(ctx context.Context) (context.Context, func()) {
	return ctx, func() {}
}

func (n *fakeNode) LeaseLeader(context.Context) (fencedv1connect.LeaseServiceClient, error) {
	return nil, nil
}

func (n *fakeNode) AdminLeader(context.Context, http.Header, bool) (fencedv1connect.AdminServiceClient, error) {
	return nil, nil
}

func (n *fakeNode) Forward(ctx context.Context, call func(context.Context) error) error {
	return call(ctx)
}
func (n *fakeNode) Name(context.Context, http.Header) {}

func (n *fakeNode) count(what string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.counts[what]++
}

func (n *fakeNode) CountAcquisition(error) { n.count("acquisition") }
func (n *fakeNode) CountRenewal(error)     { n.count("renewal") }
func (n *fakeNode) CountRelease(error)     { n.count("release") }

func (n *fakeNode) ObserveRequest(method string, _ time.Duration) { n.count("observed " + method) }
