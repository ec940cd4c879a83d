package server

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/admission"
	"github.com/fencedio/fenced/server/internal/peers"
	"github.com/fencedio/fenced/server/internal/security"
	"github.com/hashicorp/raft"
)

var (
	// errInvalid marks bad input: invalid_argument, nothing changed.
	errInvalid = errors.New("invalid argument")
	// errTooManyLeases refuses grants beyond Config.MaxLeases.
	errTooManyLeases = errors.New("too many leases")
	// errTooManyWaiters refuses waits beyond Config.MaxWaiters.
	errTooManyWaiters = errors.New("too many waiting acquisitions")
	// errNotReady is returned while this node cannot serve: no leader yet,
	// not the leader, or shutting down.
	errNotReady = errors.New("not ready to serve: not the leader, or no leader yet")
	// errUncertain is returned, wrapping the context's cause, when a
	// caller's context ended while its write was in the log's hands: it may
	// or may not take effect. Its code is the cause's: deadline_exceeded
	// (documented as "may have been granted"), canceled, or else
	// unavailable (the node is closing, or stopped leading); never one that
	// says "not applied".
	errUncertain = errors.New("outcome unknown: the write may still take effect")
	// errClosed ends the requests' context when the node closes.
	errClosed = errors.New("the server is closing")
)

// errQuotaExceeded is matched by *quotaError: resource_exhausted.
var errQuotaExceeded = errors.New("quota exceeded")

// quotaError refuses a request beyond a per-owner or per-principal quota
// (quota.go), and names it.
type quotaError struct {
	Quota       string // the flag that sets it, e.g. "max-leases-per-owner"
	Of          string // "owner" or "principal": whose quota is full
	Owner       string // the owner or principal
	Used, Limit int
}

func (e *quotaError) Error() string {
	return fmt.Sprintf("quota %s exceeded: %s %q has %d (limit %d)", e.Quota, e.Of, e.Owner, e.Used, e.Limit)
}

func (e *quotaError) Is(target error) bool { return target == errQuotaExceeded }

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errInvalid, fmt.Sprintf(format, args...))
}

// connectError maps domain errors to Connect codes. It is the only place
// that does.
func connectError(err error) error {
	if err == nil {
		return nil
	}
	var held *lease.HeldError
	switch {
	case errors.As(err, &held):
		ce := connect.NewError(connect.CodeFailedPrecondition, err)
		if d, derr := connect.NewErrorDetail(&fencedv1.LeaseHeld{
			Key: held.Key, Owner: held.Owner, Token: held.Token, RemainingMs: held.Remaining.Milliseconds(),
		}); derr == nil {
			ce.AddDetail(d)
		}
		return ce
	case errors.Is(err, errMemberNotAddable), errors.Is(err, peers.ErrClusterMismatch):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, lease.ErrNotHeld), errors.Is(err, errUnknownMember):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, errInvalid):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, ErrUnauthenticated):
		return connect.NewError(connect.CodeUnauthenticated, err)
	case errors.Is(err, security.ErrPermissionDenied):
		return connect.NewError(connect.CodePermissionDenied, err)
	case errors.Is(err, errTooManyLeases), errors.Is(err, errTooManyWaiters), errors.Is(err, admission.ErrTooManyStreams), errors.Is(err, errQuotaExceeded):
		return connect.NewError(connect.CodeResourceExhausted, err)
	case errors.Is(err, errNotReady), errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost),
		errors.Is(err, raft.ErrRaftShutdown), errors.Is(err, raft.ErrEnqueueTimeout),
		errors.Is(err, raft.ErrLeadershipTransferInProgress), errors.Is(err, errNoQuorumContact),
		errors.Is(err, errLeaderChanged), errors.Is(err, errClosed), errors.Is(err, errDeposed),
		errors.Is(err, errUncertain) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeUnavailable, err)
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, err)
	}
	return connect.NewError(connect.CodeInternal, err)
}

// notHeldError says which lease was not current; it matches
// lease.ErrNotHeld.
type notHeldError struct{ key, id string }

func (e *notHeldError) Error() string {
	return fmt.Sprintf("lease %s is not the current lease of %q: it expired, was released or never existed", e.id, e.key)
}

func (e *notHeldError) Is(target error) bool { return target == lease.ErrNotHeld }

// describeNotHeld replaces a bare lease.ErrNotHeld with one that names the
// key and lease.
func describeNotHeld(err error, key, id string) error {
	if errors.Is(err, lease.ErrNotHeld) {
		return &notHeldError{key: key, id: id}
	}
	return err
}
