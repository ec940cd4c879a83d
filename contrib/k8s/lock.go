package k8s

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencedio/fenced/client"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// ErrOtherIdentity is returned by Create and Update for a record that
// names a holder other than the Lock's identity.
var ErrOtherIdentity = errors.New("record names another identity")

// Lock is a resourcelock.Interface backed by the fenced lease Name. Its
// methods are safe for concurrent use.
type Lock struct {
	c              *client.Client
	name, identity string

	mu    sync.Mutex
	lease *client.Lease // the term's lease, once acquired; never replaced
}

var _ resourcelock.Interface = (*Lock)(nil)

// New returns a lock on the election name (a fenced lease key) for the
// candidate identity, which is published as the lease's owner (at most 256
// bytes; give each candidate its own, as with every client-go lock).
func New(c *client.Client, name, identity string) (*Lock, error) {
	if name == "" || identity == "" {
		return nil, fmt.Errorf("fenced lock: name %q and identity %q must not be empty: %w", name, identity, client.ErrInvalid)
	}
	return &Lock{c: c, name: name, identity: identity}, nil
}

// observed is the raw record Get returns: what the server showed. The
// elector only compares it with the previous one; the remaining time
// changes with every look while the lease is held, so the elector sees a
// live holder as freshly renewed and leaves expiry to the server.
type observed struct {
	Holder      string `json:"holder,omitempty"`
	Token       uint64 `json:"token,omitempty"`
	RemainingMs int64  `json:"remainingMs,omitempty"`
}

// Get returns the election as the server sees it: the holder's identity
// and TTL, renewed now, or an empty record when nobody holds it.
func (l *Lock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	got, err := l.c.Get(ctx, l.name)
	if err != nil {
		return nil, nil, err
	}
	rec := &resourcelock.LeaderElectionRecord{}
	var o observed
	if info := got.Lease; info != nil {
		now := metav1.Now()
		rec.HolderIdentity = info.Owner
		rec.LeaseDurationSeconds = max(int(info.TTL/time.Second), 1)
		rec.RenewTime = now
		o = observed{Holder: info.Owner, Token: info.Token, RemainingMs: info.Remaining.Milliseconds()}
	}
	raw, err := json.Marshal(o)
	return rec, raw, err
}

// Create is Update: a fenced lease key needs no creating.
func (l *Lock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.Update(ctx, ler)
}

// Update acquires the election for the Lock's identity (once, without
// waiting: a held election returns a *client.HeldError), or checks that
// the lease is still held; a record with no holder (the elector's release)
// releases it. The TTL of a new lease is ler.LeaseDurationSeconds.
func (l *Lock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case ler.HolderIdentity == "":
		if l.lease == nil {
			return nil
		}
		if err := l.lease.Release(ctx); err != nil && !errors.Is(err, client.ErrNotHeld) {
			return err
		}
		return nil
	case ler.HolderIdentity != l.identity:
		return fmt.Errorf("fenced lock %q: %w: %q, not %q", l.name, ErrOtherIdentity, ler.HolderIdentity, l.identity)
	case l.lease != nil:
		// The lease renews itself; a lost one never comes back.
		return l.lease.Err()
	}
	ttl := time.Duration(ler.LeaseDurationSeconds) * time.Second
	lease, err := l.c.Acquire(ctx, l.name, client.WithOwner(l.identity), client.WithTTL(ttl))
	if err != nil {
		return err
	}
	l.lease = lease
	return nil
}

// RecordEvent does nothing.
func (l *Lock) RecordEvent(string) {}

// Identity returns the candidate's identity.
func (l *Lock) Identity() string { return l.identity }

// Describe names the lock in the elector's logs.
func (l *Lock) Describe() string { return "fenced/" + l.name }

// Lease returns the term's lease once this Lock has been elected, nil
// before: its Token is the fencing token, its Context ends when the lease
// is lost or released. It is also a fence.Lease, for the guards'
// lease-taking calls and the fencehttp transport.
func (l *Lock) Lease() *client.Lease {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lease
}

// Token returns the fencing token while this Lock leads, 0 otherwise.
func (l *Lock) Token() uint64 {
	lease := l.Lease()
	if lease == nil || lease.Err() != nil {
		return 0
	}
	return lease.Token()
}
