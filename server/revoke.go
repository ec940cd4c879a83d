package server

import (
	"context"
	"fmt"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/internal/gen/fenced/v1"
	"github.com/fencedio/fenced/internal/gen/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/lease"
)

type adminService struct{ s *Server }

var _ fencedv1connect.AdminServiceHandler = (*adminService)(nil)

func (v *adminService) Revoke(ctx context.Context, req *connect.Request[fencedv1.RevokeRequest]) (*connect.Response[fencedv1.RevokeResponse], error) {
	key := req.Msg.GetKey()
	if err := validateKey(key); err != nil {
		return nil, connectError(err)
	}
	p, err := v.s.authorize(ctx, PermAdmin, key)
	if err != nil {
		return nil, connectError(err)
	}
	l, err := v.s.Revoke(ctx, key, p.Name)
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&fencedv1.RevokeResponse{Lease: wireLease(l, 0, publicView), RevokedBy: p.Name}), nil
}

// Revoke ends the current lease of key on behalf of principal by, whoever
// holds it, and returns it. The end is a log entry naming by; like a
// release it hands the key to its first waiter, if any, in the same entry,
// and the holder's next renewal finds its lease gone. lease.ErrNotHeld when
// key is free.
func (s *Server) Revoke(ctx context.Context, key, by string) (lease.Lease, error) {
	if err := validateKey(key); err != nil {
		return lease.Lease{}, err
	}
	if !s.ready.Load() {
		return lease.Lease{}, errNotReady
	}
	cur, ok := s.currentOf(key)
	if !ok {
		return lease.Lease{}, &freeKeyError{key: key}
	}
	// The command names the lease seen here: should it end meanwhile, the
	// revocation changes nothing rather than ending its successor.
	res, err := s.applyHandover(ctx, lease.Command{Op: lease.OpRevoke, Key: key, ID: cur.ID, By: by})
	if err != nil {
		return lease.Lease{}, err
	}
	if res.Err != nil {
		return lease.Lease{}, &freeKeyError{key: key}
	}
	return res.Event.Lease, nil
}

func (s *Server) currentOf(key string) (lease.Lease, bool) {
	var (
		l  lease.Lease
		ok bool
	)
	s.fsm.read(func(st *lease.State) { l, ok = st.Get(key) })
	return l, ok
}

// leaseOwner returns the owner of lease id of key, if it is current.
func (s *Server) leaseOwner(key, id string) (string, bool) {
	var (
		l   lease.Lease
		err error
	)
	s.fsm.read(func(st *lease.State) { l, err = st.Current(key, id) })
	return l.Owner, err == nil
}

// authorizeAcquire checks that the caller may acquire key and returns the
// owner it may record in place of the owner it asked for (see
// acquireOwner).
func (s *Server) authorizeAcquire(ctx context.Context, key, owner string) (string, error) {
	if err := validateKey(key); err != nil {
		return "", err
	}
	p, err := s.authorize(ctx, PermAcquire, key)
	if err != nil {
		return "", err
	}
	return s.acquireOwner(p, key, owner), nil
}

// authorizeRenew checks that the caller may renew or release lease id of
// key.
func (s *Server) authorizeRenew(ctx context.Context, key, id string) error {
	if err := validateKey(key); err != nil {
		return err
	}
	p, err := s.authorize(ctx, PermRenew, key)
	if err != nil {
		return err
	}
	return s.authorizeHolder(p, key, id)
}

// freeKeyError is a Revoke of a key nobody holds; it matches
// lease.ErrNotHeld.
type freeKeyError struct{ key string }

func (e *freeKeyError) Error() string     { return fmt.Sprintf("key %q has no current lease", e.key) }
func (e *freeKeyError) Is(err error) bool { return err == lease.ErrNotHeld }
