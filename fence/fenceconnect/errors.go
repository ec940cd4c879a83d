package fenceconnect

import (
	"context"
	"errors"
	"strconv"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencehttp"
)

// Field names of the stale-token error detail, a google.protobuf.Struct.
// Tokens are decimal strings so that no JSON or Struct number (a double)
// rounds them.
const (
	detailType      = "type"
	detailScope     = "scope"
	detailPresented = "presentedToken"
	detailHighest   = "highestToken"
	detailToken     = "token"
	detailSequence  = "sequence"
	detailLast      = "lastSequence"
)

// NewError maps an error from fencehttp.FromHeader or a fence.Guard to the
// Connect error the interceptor answers with. It is the one place where
// fencing errors get RPC codes:
//
//	*fence.StaleTokenError                 failed_precondition, with detail
//	*fence.DuplicateError                  already_exists, with detail
//	*fence.SequenceGapError                failed_precondition, with detail
//	fence.ErrInvalidSequence               invalid_argument
//	fence.ErrNoToken                       invalid_argument
//	fencehttp.ErrInvalidToken              invalid_argument
//	fence.ErrTokenOutOfRange               invalid_argument
//	fence.ErrInvalidScope                  invalid_argument
//	fence.ErrBadSignature                  permission_denied
//	context.Canceled / DeadlineExceeded    canceled / deadline_exceeded
//	anything else                          unavailable (message hidden)
//
// An error that already is a *connect.Error is returned as is. The result
// wraps err, so errors.Is(result, fence.ErrStaleToken) holds on the server.
// NewError(nil) returns nil.
func NewError(err error) *connect.Error {
	if err == nil {
		return nil
	}
	if stale, ok := errors.AsType[*fence.StaleTokenError](err); ok {
		ce := connect.NewError(connect.CodeFailedPrecondition, err)
		// Scopes reaching a guard are valid UTF-8, the only thing that could
		// make the Struct fail to marshal; without a detail the client still
		// sees failed_precondition but cannot tell it is stale.
		if d, derr := connect.NewErrorDetail(staleDetail(stale)); derr == nil {
			ce.AddDetail(d)
		}
		return ce
	}
	if dup, ok := errors.AsType[*fence.DuplicateError](err); ok {
		return withDetail(connect.NewError(connect.CodeAlreadyExists, err),
			sequenceDetail(fencehttp.ProblemDuplicate, dup.Scope, dup.Token, dup.Sequence, dup.Last))
	}
	if gap, ok := errors.AsType[*fence.SequenceGapError](err); ok {
		return withDetail(connect.NewError(connect.CodeFailedPrecondition, err),
			sequenceDetail(fencehttp.ProblemSequenceGap, gap.Scope, gap.Token, gap.Sequence, gap.Last))
	}
	if ce, ok := errors.AsType[*connect.Error](err); ok {
		return ce
	}
	switch {
	case errors.Is(err, fence.ErrInvalidSequence),
		errors.Is(err, fence.ErrNoToken),
		errors.Is(err, fencehttp.ErrInvalidToken),
		errors.Is(err, fence.ErrTokenOutOfRange),
		errors.Is(err, fence.ErrInvalidScope):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, fence.ErrBadSignature):
		return connect.NewError(connect.CodePermissionDenied, err)
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, err)
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	default:
		return connect.NewError(connect.CodeUnavailable, &guardError{err})
	}
}

// guardError hides a guard's own failure (a database address, say) from the
// client while keeping it for errors.Is/As on the server.
type guardError struct{ err error }

func (e *guardError) Error() string { return "fencing guard unavailable; nothing was applied" }
func (e *guardError) Unwrap() error { return e.err }

func staleDetail(e *fence.StaleTokenError) *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		detailType:      structpb.NewStringValue(fencehttp.ProblemStaleToken),
		detailScope:     structpb.NewStringValue(e.Scope),
		detailPresented: structpb.NewStringValue(strconv.FormatUint(e.Presented, 10)),
		detailHighest:   structpb.NewStringValue(strconv.FormatUint(e.Highest, 10)),
	}}
}

func sequenceDetail(typ, scope string, token, seq, last uint64) *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		detailType:     structpb.NewStringValue(typ),
		detailScope:    structpb.NewStringValue(scope),
		detailToken:    structpb.NewStringValue(strconv.FormatUint(token, 10)),
		detailSequence: structpb.NewStringValue(strconv.FormatUint(seq, 10)),
		detailLast:     structpb.NewStringValue(strconv.FormatUint(last, 10)),
	}}
}

func withDetail(ce *connect.Error, s *structpb.Struct) *connect.Error {
	if d, err := connect.NewErrorDetail(s); err == nil {
		ce.AddDetail(d)
	}
	return ce
}

// SequenceFromError returns the duplicate (*fence.DuplicateError, matching
// fence.ErrDuplicate: the call was applied before, and not again) or the
// gap (*fence.SequenceGapError) that err reports, recognised on a client by
// its code (already_exists, failed_precondition) and a Struct detail whose
// "type" is fencehttp.ProblemDuplicate or ProblemSequenceGap; nil for any
// other error.
func SequenceFromError(err error) error {
	if err == nil {
		return nil
	}
	if dup, ok := errors.AsType[*fence.DuplicateError](err); ok {
		return dup
	}
	if gap, ok := errors.AsType[*fence.SequenceGapError](err); ok {
		return gap
	}
	ce, ok := errors.AsType[*connect.Error](err)
	if !ok {
		return nil
	}
	for _, d := range ce.Details() {
		v, err := d.Value()
		if err != nil {
			continue
		}
		s, ok := v.(*structpb.Struct)
		if !ok {
			continue
		}
		f := s.GetFields()
		num := func(k string) (uint64, bool) {
			n, err := strconv.ParseUint(f[k].GetStringValue(), 10, 64)
			return n, err == nil
		}
		token, ok1 := num(detailToken)
		seq, ok2 := num(detailSequence)
		last, ok3 := num(detailLast)
		if !ok1 || !ok2 || !ok3 {
			continue
		}
		scope := f[detailScope].GetStringValue()
		switch {
		case ce.Code() == connect.CodeAlreadyExists && f[detailType].GetStringValue() == fencehttp.ProblemDuplicate:
			return &fence.DuplicateError{Scope: scope, Token: token, Sequence: seq, Last: last}
		case ce.Code() == connect.CodeFailedPrecondition && f[detailType].GetStringValue() == fencehttp.ProblemSequenceGap:
			return &fence.SequenceGapError{Scope: scope, Token: token, Sequence: seq, Last: last}
		}
	}
	return nil
}

// StaleFromError reports whether err is a stale-token rejection and returns
// it as a *fence.StaleTokenError, which matches fence.ErrStaleToken.
//
// On a client, err is recognised by its code, failed_precondition, and a
// google.protobuf.Struct detail whose "type" is fencehttp.ProblemStaleToken
// and whose "scope", "presentedToken" and "highestToken" are strings (tokens
// in decimal). Other failed_precondition errors, such as the lease service's
// "held by another", are not stale. On a server, a *fence.StaleTokenError
// anywhere in err's chain is returned directly.
func StaleFromError(err error) (*fence.StaleTokenError, bool) {
	if err == nil {
		return nil, false
	}
	if stale, ok := errors.AsType[*fence.StaleTokenError](err); ok {
		return stale, true
	}
	ce, ok := errors.AsType[*connect.Error](err)
	if !ok || ce.Code() != connect.CodeFailedPrecondition {
		return nil, false
	}
	for _, d := range ce.Details() {
		if stale, ok := staleFromDetail(d); ok {
			return stale, true
		}
	}
	return nil, false
}

func staleFromDetail(d *connect.ErrorDetail) (*fence.StaleTokenError, bool) {
	if d.Type() != "google.protobuf.Struct" {
		return nil, false
	}
	v, err := d.Value()
	if err != nil {
		return nil, false
	}
	s, ok := v.(*structpb.Struct)
	if !ok {
		return nil, false
	}
	f := s.GetFields()
	if f[detailType].GetStringValue() != fencehttp.ProblemStaleToken {
		return nil, false
	}
	presented, err := strconv.ParseUint(f[detailPresented].GetStringValue(), 10, 64)
	if err != nil {
		return nil, false
	}
	highest, err := strconv.ParseUint(f[detailHighest].GetStringValue(), 10, 64)
	if err != nil {
		return nil, false
	}
	return &fence.StaleTokenError{Scope: f[detailScope].GetStringValue(), Presented: presented, Highest: highest}, true
}
