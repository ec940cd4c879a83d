package apierr

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/admission"
	"github.com/fencedio/fenced/server/internal/peers"
	"github.com/fencedio/fenced/server/internal/security"
	"github.com/hashicorp/raft"
)

// Every domain error has its code, and keeps its message: clients and
// external tools test against both.
func TestConnectCodes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want connect.Code
	}{
		{&lease.HeldError{Key: "k", Owner: "o", Token: 3}, connect.CodeFailedPrecondition},
		{ErrMemberNotAddable, connect.CodeFailedPrecondition},
		{peers.ErrClusterMismatch, connect.CodeFailedPrecondition},
		{lease.ErrNotHeld, connect.CodeNotFound},
		{DescribeNotHeld(lease.ErrNotHeld, "k", "id"), connect.CodeNotFound},
		{ErrUnknownMember, connect.CodeNotFound},
		{Invalidf("key %s", "is empty"), connect.CodeInvalidArgument},
		{fmt.Errorf("%w: no token", security.ErrUnauthenticated), connect.CodeUnauthenticated},
		{security.ErrPermissionDenied, connect.CodePermissionDenied},
		{ErrTooManyLeases, connect.CodeResourceExhausted},
		{ErrTooManyWaiters, connect.CodeResourceExhausted},
		{admission.ErrTooManyStreams, connect.CodeResourceExhausted},
		{&QuotaError{Quota: "max-leases-per-owner", Of: "owner", Owner: "o", Used: 2, Limit: 2}, connect.CodeResourceExhausted},
		{ErrNotReady, connect.CodeUnavailable},
		{raft.ErrNotLeader, connect.CodeUnavailable},
		{raft.ErrLeadershipLost, connect.CodeUnavailable},
		{raft.ErrRaftShutdown, connect.CodeUnavailable},
		{raft.ErrEnqueueTimeout, connect.CodeUnavailable},
		{raft.ErrLeadershipTransferInProgress, connect.CodeUnavailable},
		{ErrNoQuorumContact, connect.CodeUnavailable},
		{ErrLeaderChanged, connect.CodeUnavailable},
		{ErrClosed, connect.CodeUnavailable},
		{ErrDeposed, connect.CodeUnavailable},
		{context.DeadlineExceeded, connect.CodeDeadlineExceeded},
		{context.Canceled, connect.CodeCanceled},
		{errors.New("disk on fire"), connect.CodeInternal},
	} {
		err := Connect(tc.err)
		var ce *connect.Error
		if !errors.As(err, &ce) {
			t.Errorf("Connect(%v) = %T, want a *connect.Error", tc.err, err)
			continue
		}
		if ce.Code() != tc.want || ce.Message() != tc.err.Error() {
			t.Errorf("Connect(%v) = %v %q, want %v %q", tc.err, ce.Code(), ce.Message(), tc.want, tc.err.Error())
		}
	}
	if err := Connect(nil); err != nil {
		t.Errorf("Connect(nil) = %v", err)
	}
}

// The messages are part of the wire contract.
func TestMessages(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{ErrNotReady, "not ready to serve: not the leader, or no leader yet"},
		{Invalidf("limit %d is negative", -1), "invalid argument: limit -1 is negative"},
		{&QuotaError{Quota: "max-leases-per-owner", Of: "owner", Owner: "o", Used: 2, Limit: 2},
			`quota max-leases-per-owner exceeded: owner "o" has 2 (limit 2)`},
		{DescribeNotHeld(lease.ErrNotHeld, "k", "id"),
			`lease id is not the current lease of "k": it expired, was released or never existed`},
		{Connect(fmt.Errorf("%w: %w", ErrUncertain, context.DeadlineExceeded)),
			"deadline_exceeded: outcome unknown: the write may still take effect: context deadline exceeded"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("message %q, want %q", got, tc.want)
		}
	}
	if err := DescribeNotHeld(ErrNotReady, "k", "id"); err != ErrNotReady {
		t.Errorf("DescribeNotHeld changed another error: %v", err)
	}
}

// A refused holding names the holder in a LeaseHeld detail.
func TestHeldDetail(t *testing.T) {
	var ce *connect.Error
	if !errors.As(Connect(&lease.HeldError{Key: "k", Owner: "o", Token: 3}), &ce) || len(ce.Details()) != 1 {
		t.Fatalf("no detail")
	}
	m, err := ce.Details()[0].Value()
	if h, ok := m.(*fencedv1.LeaseHeld); err != nil || !ok || h.GetKey() != "k" || h.GetOwner() != "o" || h.GetToken() != 3 {
		t.Errorf("detail %v (%v), want the holder", m, err)
	}
}

// An uncertain outcome keeps the code of what cut it, and never one that
// says "not applied".
func TestUncertainOutcomeCodes(t *testing.T) {
	for _, tc := range []struct {
		cause error
		want  connect.Code
	}{
		{context.DeadlineExceeded, connect.CodeDeadlineExceeded},
		{context.Canceled, connect.CodeCanceled},
		{ErrClosed, connect.CodeUnavailable},
		{ErrDeposed, connect.CodeUnavailable},
	} {
		err := fmt.Errorf("%w: %w", ErrUncertain, tc.cause)
		if got := connect.CodeOf(Connect(err)); got != tc.want {
			t.Errorf("uncertain, cut by %v: %v, want %v", tc.cause, got, tc.want)
		}
	}
}

func TestValidateText(t *testing.T) {
	for _, s := range []string{"", "worker é", "a/b c", "名前"} {
		if err := ValidateText("owner", s); err != nil {
			t.Errorf("ValidateText(%q): %v, want valid", s, err)
		}
	}
	for s, want := range map[string]string{
		"a\tb":  "invalid argument: id has a non-printable character U+0009 at byte 1",
		"a\x00": "invalid argument: id has a non-printable character U+0000 at byte 1",
		"\xff":  "invalid argument: id is not valid UTF-8",
	} {
		err := ValidateText("id", s)
		if !errors.Is(err, ErrInvalid) || err.Error() != want {
			t.Errorf("ValidateText(%q) = %v, want %q", s, err, want)
		}
	}
}
