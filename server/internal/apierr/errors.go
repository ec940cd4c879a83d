package apierr

import (
	"context"
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/admission"
	"github.com/fencedio/fenced/server/internal/peers"
	"github.com/fencedio/fenced/server/internal/security"
	"github.com/hashicorp/raft"
)

var (
	// ErrInvalid marks bad input: invalid_argument, nothing changed.
	ErrInvalid = errors.New("invalid argument")
	// ErrTooManyLeases refuses grants beyond Config.MaxLeases.
	ErrTooManyLeases = errors.New("too many leases")
	// ErrTooManyLeaseBytes refuses grants beyond Config.MaxLeaseBytes.
	ErrTooManyLeaseBytes = errors.New("lease memory budget exhausted")
	// ErrTooManyWaiters refuses waits beyond Config.MaxWaiters.
	ErrTooManyWaiters = errors.New("too many waiting acquisitions")
	// ErrNotReady is returned while this node cannot serve: no leader yet,
	// not the leader, or shutting down.
	ErrNotReady = errors.New("not ready to serve: not the leader, or no leader yet")
	// ErrUncertain is returned, wrapping the context's cause, when a
	// caller's context ended while its write was in the log's hands: it may
	// or may not take effect. Its code is the cause's: deadline_exceeded
	// (documented as "may have been granted"), canceled, or else
	// unavailable (the node is closing, or stopped leading); never one that
	// says "not applied".
	ErrUncertain = errors.New("outcome unknown: the write may still take effect")
	// ErrMaybeGranted answers an acquisition that an earlier attempt of
	// the same call may have been granted: that attempt's grant, written
	// when the leader lost its leadership, holds the key (docs/protocol.md,
	// section 3.8). The outcome is unknown: unavailable, like any
	// acquisition a failover cut.
	ErrMaybeGranted = errors.New("outcome unknown: an earlier attempt of this acquisition may have been granted")
	// ErrClosed ends the requests' context when the node closes.
	ErrClosed = errors.New("the server is closing")
)

// ErrUnknownMember is returned for a member ID that is not in the
// configuration: not_found.
var ErrUnknownMember = errors.New("no such member")

// ErrMemberNotAddable is returned when the node to add is not running, is
// another node, or is a member that lost its data directory and has not
// been removed: failed_precondition.
var ErrMemberNotAddable = errors.New("cannot add the member")

// ErrNoQuorumContact is returned when leadership was confirmed by raft but
// no quorum answered a request sent after the check began, after a few
// rounds: unavailable, the caller may retry.
var ErrNoQuorumContact = errors.New("not the leader, or no quorum contact since the request arrived")

// ErrDeposed is the cause of a call's context when this node stopped
// leading while it served the call.
var ErrDeposed = errors.New("this node stopped leading")

// ErrLeaderChanged ends a forwarded call when this node learns of another
// leader (or loses the one it knew) while the call is at the old one.
var ErrLeaderChanged = errors.New("the leader changed while the call was forwarded to it")

// ErrQuotaExceeded is matched by *QuotaError: resource_exhausted.
var ErrQuotaExceeded = errors.New("quota exceeded")

// QuotaError refuses a request beyond a per-owner or per-principal quota
// (the node's quota.go), and names it.
type QuotaError struct {
	Quota       string // the flag that sets it, e.g. "max-leases-per-owner"
	Of          string // "owner" or "principal": whose quota is full
	Owner       string // the owner or principal
	Used, Limit int
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("quota %s exceeded: %s %q has %d (limit %d)", e.Quota, e.Of, e.Owner, e.Used, e.Limit)
}

func (e *QuotaError) Is(target error) bool { return target == ErrQuotaExceeded }

// Invalidf returns an ErrInvalid that says what is invalid.
func Invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// Connect maps domain errors to Connect codes. It is the only place that
// does.
func Connect(err error) error {
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
	case errors.Is(err, ErrMemberNotAddable), errors.Is(err, peers.ErrClusterMismatch):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, lease.ErrNotHeld), errors.Is(err, ErrUnknownMember):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, ErrInvalid):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, security.ErrUnauthenticated):
		return connect.NewError(connect.CodeUnauthenticated, err)
	case errors.Is(err, security.ErrPermissionDenied):
		return connect.NewError(connect.CodePermissionDenied, err)
	case errors.Is(err, ErrTooManyLeases), errors.Is(err, ErrTooManyLeaseBytes), errors.Is(err, ErrTooManyWaiters), errors.Is(err, admission.ErrTooManyStreams), errors.Is(err, ErrQuotaExceeded):
		return connect.NewError(connect.CodeResourceExhausted, err)
	case errors.Is(err, ErrNotReady), errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost),
		errors.Is(err, raft.ErrRaftShutdown), errors.Is(err, raft.ErrEnqueueTimeout),
		errors.Is(err, raft.ErrLeadershipTransferInProgress), errors.Is(err, ErrNoQuorumContact),
		errors.Is(err, ErrLeaderChanged), errors.Is(err, ErrClosed), errors.Is(err, ErrDeposed), errors.Is(err, ErrMaybeGranted),
		errors.Is(err, ErrUncertain) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled):
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

// DescribeNotHeld replaces a bare lease.ErrNotHeld with one that names the
// key and lease.
func DescribeNotHeld(err error, key, id string) error {
	if errors.Is(err, lease.ErrNotHeld) {
		return &notHeldError{key: key, id: id}
	}
	return err
}

// ValidateText accepts printable UTF-8, no control characters and no NUL,
// the rule of every text field of the API; it refuses anything else as
// invalid, naming field.
func ValidateText(field, s string) error {
	if !utf8.ValidString(s) {
		return Invalidf("%s is not valid UTF-8", field)
	}
	for i, r := range s {
		if !unicode.IsGraphic(r) {
			return Invalidf("%s has a non-printable character %U at byte %d", field, r, i)
		}
	}
	return nil
}
