package fencehttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/fencedio/fenced/fence"
)

// ContentTypeProblem is the media type of every error answer (RFC 9457).
const ContentTypeProblem = "application/problem+json"

// Problem type identifiers. They are compared as strings by clients (a
// Problem is recognised as stale by its Type alone), so they are part of the
// wire contract and never change. They are URNs rather than URLs because
// nothing is published at an address.
const (
	ProblemStaleToken       = "urn:fenced:problem:stale-token"
	ProblemMissingToken     = "urn:fenced:problem:missing-token"
	ProblemInvalidToken     = "urn:fenced:problem:invalid-token"
	ProblemInvalidScope     = "urn:fenced:problem:invalid-scope"
	ProblemGuardUnavailable = "urn:fenced:problem:guard-unavailable"
	ProblemBadSignature     = "urn:fenced:problem:bad-signature"
	// ProblemDuplicate answers a write whose Fencing-Sequence was already
	// applied under its token (fence.ErrDuplicate): the write, or an earlier
	// attempt of it, took effect; it was not applied again. 409 and not 200:
	// the middleware cannot replay the first attempt's answer, and a 200
	// would pass for it.
	ProblemDuplicate       = "urn:fenced:problem:duplicate-write"
	ProblemSequenceGap     = "urn:fenced:problem:sequence-gap"
	ProblemInvalidSequence = "urn:fenced:problem:invalid-sequence"
)

// maxProblemBytes bounds how much of a response body the client side reads
// to recognise a stale answer; real problem bodies are a few hundred bytes.
const maxProblemBytes = 64 << 10

// Problem is an RFC 9457 problem details object with the fencing extension
// members.
//
// Tokens are JSON numbers holding the full uint64 range. Go's encoding/json
// reads them exactly; JavaScript's JSON.parse loses precision above 2^53,
// which fenced reaches only after 2^53 acquisitions of one key.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`

	// Scope is the fencing scope the request was for, when known.
	Scope string `json:"scope,omitempty"`
	// PresentedToken and HighestToken are set on stale-token problems.
	PresentedToken uint64 `json:"presentedToken,omitempty"`
	HighestToken   uint64 `json:"highestToken,omitempty"`
	// Token, Sequence and LastSequence are set on duplicate-write and
	// sequence-gap problems.
	Token        uint64 `json:"token,omitempty"`
	Sequence     uint64 `json:"sequence,omitempty"`
	LastSequence uint64 `json:"lastSequence,omitempty"`
}

// StaleProblem returns the 409 answer for a stale token.
func StaleProblem(e *fence.StaleTokenError) *Problem {
	return &Problem{
		Type:           ProblemStaleToken,
		Title:          "Stale fencing token",
		Status:         http.StatusConflict,
		Detail:         e.Error(),
		Scope:          e.Scope,
		PresentedToken: e.Presented,
		HighestToken:   e.Highest,
	}
}

// ProblemFor maps an error from FromHeader, ParseToken, ValidateScope or a
// fence.Guard to the answer the middleware gives for it, so that other
// servers (the reference store) answer identically. It returns nil for a
// nil error.
//
//	*fence.StaleTokenError    409 Conflict
//	*fence.DuplicateError     409 Conflict (duplicate-write)
//	*fence.SequenceGapError   409 Conflict (sequence-gap)
//	fence.ErrInvalidSequence  400 Bad Request
//	fence.ErrNoToken          428 Precondition Required
//	ErrInvalidToken           400 Bad Request
//	fence.ErrTokenOutOfRange  400 Bad Request (invalid-token; detail says why)
//	fence.ErrInvalidScope     400 Bad Request
//	fence.ErrBadSignature     403 Forbidden
//	anything else             503 Service Unavailable
//
// The detail of a 503 does not include err's text: a guard's storage error
// can describe internals that clients have no business seeing.
func ProblemFor(err error) *Problem {
	if err == nil {
		return nil
	}
	if stale, ok := errors.AsType[*fence.StaleTokenError](err); ok {
		return StaleProblem(stale)
	}
	if dup, ok := errors.AsType[*fence.DuplicateError](err); ok {
		return &Problem{Type: ProblemDuplicate, Title: "Duplicate write", Status: http.StatusConflict, Detail: dup.Error(),
			Scope: dup.Scope, Token: dup.Token, Sequence: dup.Sequence, LastSequence: dup.Last}
	}
	if gap, ok := errors.AsType[*fence.SequenceGapError](err); ok {
		return &Problem{Type: ProblemSequenceGap, Title: "Fencing sequence gap", Status: http.StatusConflict, Detail: gap.Error(),
			Scope: gap.Scope, Token: gap.Token, Sequence: gap.Sequence, LastSequence: gap.Last}
	}
	switch {
	case errors.Is(err, fence.ErrInvalidSequence):
		return &Problem{
			Type:   ProblemInvalidSequence,
			Title:  "Invalid fencing sequence",
			Status: http.StatusBadRequest,
			Detail: err.Error(),
		}
	case errors.Is(err, fence.ErrNoToken):
		return &Problem{
			Type:   ProblemMissingToken,
			Title:  "Fencing token required",
			Status: http.StatusPreconditionRequired,
			Detail: "mutating requests need the " + HeaderScope + " and " + HeaderToken + " headers",
		}
	case errors.Is(err, ErrInvalidToken), errors.Is(err, fence.ErrTokenOutOfRange):
		// A token the guard cannot store is as unusable as a malformed
		// one, and as permanent: a 503 would invite a retry.
		return &Problem{
			Type:   ProblemInvalidToken,
			Title:  "Invalid fencing token",
			Status: http.StatusBadRequest,
			Detail: err.Error(),
		}
	case errors.Is(err, fence.ErrBadSignature):
		return &Problem{
			Type:   ProblemBadSignature,
			Title:  "Invalid fencing token signature",
			Status: http.StatusForbidden,
			Detail: err.Error(),
		}
	case errors.Is(err, fence.ErrInvalidScope):
		return &Problem{
			Type:   ProblemInvalidScope,
			Title:  "Invalid fencing scope",
			Status: http.StatusBadRequest,
			Detail: err.Error(),
		}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return &Problem{
			Type:   ProblemGuardUnavailable,
			Title:  "Fencing guard unavailable",
			Status: http.StatusServiceUnavailable,
			Detail: "the request ended before the guard decided",
		}
	default:
		return &Problem{
			Type:   ProblemGuardUnavailable,
			Title:  "Fencing guard unavailable",
			Status: http.StatusServiceUnavailable,
			Detail: "the guard could not check the token; nothing was applied",
		}
	}
}

// WriteProblem writes p as the complete answer.
func WriteProblem(w http.ResponseWriter, p *Problem) {
	body, err := json.Marshal(p)
	if err != nil {
		// A Problem has only strings and numbers; Marshal cannot fail.
		panic(fmt.Sprintf("fencehttp: encoding problem: %v", err))
	}
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", ContentTypeProblem)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Del("Content-Length")
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}

// DecodeProblem reads a problem details object from r.
func DecodeProblem(r io.Reader) (*Problem, error) {
	var p Problem
	if err := json.NewDecoder(io.LimitReader(r, maxProblemBytes)).Decode(&p); err != nil {
		return nil, fmt.Errorf("decode problem: %w", err)
	}
	return &p, nil
}

// Stale returns the stale-token error described by p, if p is one.
func (p *Problem) Stale() (*fence.StaleTokenError, bool) {
	if p == nil || p.Type != ProblemStaleToken {
		return nil, false
	}
	return &fence.StaleTokenError{Scope: p.Scope, Presented: p.PresentedToken, Highest: p.HighestToken}, true
}

// Err returns the fencing outcome p describes as an error: a
// *fence.StaleTokenError, *fence.DuplicateError or *fence.SequenceGapError,
// nil for any other problem.
func (p *Problem) Err() error {
	if stale, ok := p.Stale(); ok {
		return stale
	}
	switch {
	case p == nil:
		return nil
	case p.Type == ProblemDuplicate:
		return &fence.DuplicateError{Scope: p.Scope, Token: p.Token, Sequence: p.Sequence, Last: p.LastSequence}
	case p.Type == ProblemSequenceGap:
		return &fence.SequenceGapError{Scope: p.Scope, Token: p.Token, Sequence: p.Sequence, Last: p.LastSequence}
	}
	return nil
}

// StaleFromResponse reports whether resp is a stale-token rejection (409
// with an application/problem+json body of type ProblemStaleToken) and
// returns it as a *fence.StaleTokenError, which matches fence.ErrStaleToken.
//
// It reads at most 64 KiB of the body to decide and puts what it read back,
// so resp.Body still yields the whole body from the start; closing resp.Body
// stays the caller's job. A body that cannot be read or decoded is not
// reported as stale.
func StaleFromResponse(resp *http.Response) (*fence.StaleTokenError, bool) {
	p, ok := conflictProblem(resp)
	if !ok {
		return nil, false
	}
	return p.Stale()
}

// ErrorFromResponse returns the fencing outcome of a 409 answer: a
// *fence.StaleTokenError (fence.ErrStaleToken), *fence.DuplicateError
// (fence.ErrDuplicate: the write was applied before) or
// *fence.SequenceGapError (fence.ErrSequenceGap); nil for any other
// answer. It reads the body as StaleFromResponse does and puts it back.
// Inside fence.Retry, return it for the answer:
//
//	err := fence.Retry(ctx, lease, 3, func(ctx context.Context) error {
//		resp, err := client.Do(newRequest(ctx)) // a Transport sends the sequence
//		if err != nil {
//			return err // a lost answer matches fence.ErrUnknownOutcome
//		}
//		defer resp.Body.Close()
//		return fencehttp.ErrorFromResponse(resp)
//	})
func ErrorFromResponse(resp *http.Response) error {
	p, ok := conflictProblem(resp)
	if !ok {
		return nil
	}
	return p.Err()
}

// conflictProblem decodes the problem of a 409 problem+json answer.
func conflictProblem(resp *http.Response) (*Problem, bool) {
	if resp == nil || resp.StatusCode != http.StatusConflict || resp.Body == nil || resp.Body == http.NoBody {
		return nil, false
	}
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil || mt != ContentTypeProblem {
		return nil, false
	}
	buf, readErr := io.ReadAll(io.LimitReader(resp.Body, maxProblemBytes+1))
	var rest io.Reader = resp.Body
	if readErr != nil {
		// Keep reporting the failure instead of reading on from a broken body.
		rest = errReader{readErr}
	}
	resp.Body = replayBody{Reader: io.MultiReader(bytes.NewReader(buf), rest), Closer: resp.Body}
	if readErr != nil || len(buf) > maxProblemBytes {
		return nil, false
	}
	p, err := DecodeProblem(bytes.NewReader(buf))
	if err != nil {
		return nil, false
	}
	return p, true
}

// replayBody serves the peeked bytes, then the rest of the original body,
// and closes the original.
type replayBody struct {
	io.Reader
	io.Closer
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
