package fencehttp

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/fencedio/fenced/fence"
)

// Lease is the holder's side of a lease: *client.Lease satisfies it. It is
// fence.Lease; the name stays here so that existing code keeps compiling.
type Lease = fence.Lease

// Signed is implemented by leases whose token fenced signed
// (*client.Lease does): Transport and fenceconnect's client interceptor
// send the signature in Fencing-Token-Signature.
type Signed interface {
	Signature() string
}

// Transport is an http.RoundTripper that fences the requests it carries with
// a lease, and gives up the lease when a resource reports its token stale
// (invariant I7).
//
// It sets Fencing-Scope to Lease.Key() and Fencing-Token to Lease.Token() (and
// Fencing-Owner to the lease's owner when the lease is fence.Owned) on
// every request, and Fencing-Sequence when the request's context carries a
// sequence (fence.WithSequence, fence.Retry) or the lease numbers its
// writes (fence.Sequenced), replacing any values the
// caller set: servers fence only
// mutating methods, and sending the headers on reads too keeps a server
// that fences some POST-for-read endpoint working. It does not modify the
// caller's request.
//
// When the answer is a stale-token problem (see StaleFromResponse) it calls
// Lease.MarkLost with the *fence.StaleTokenError, then returns the response to
// the caller unchanged (the body is still readable from the start). It never
// retries: a stale request must not be sent again, with this token or with a
// newer one, by anything but a new decision of the caller.
//
// A failure to carry a request with a sequence matches
// fence.ErrUnknownOutcome (the request may have arrived); the failures of
// requests without one are returned as they are. ErrorFromResponse tells a
// duplicate answer from a stale one.
//
// Transport does not stop requests after the lease is lost; make requests
// with the lease's context so that they are cancelled.
type Transport struct {
	// Base carries the requests. Default: http.DefaultTransport.
	Base http.RoundTripper
	// Lease supplies the headers and is told about stale answers. Required.
	Lease Lease
}

var _ http.RoundTripper = (*Transport)(nil)

// NewTransport returns a Transport for lease over base (nil for
// http.DefaultTransport).
func NewTransport(lease Lease, base http.RoundTripper) *Transport {
	return &Transport{Base: base, Lease: lease}
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.Lease == nil {
		if req.Body != nil {
			req.Body.Close() // RoundTrip always closes the body
		}
		return nil, errors.New("fencehttp: Transport without a Lease")
	}
	out := req.Clone(req.Context())
	out.Header.Set(HeaderScope, t.Lease.Key())
	out.Header.Set(HeaderToken, strconv.FormatUint(t.Lease.Token(), 10))
	out.Header.Del(HeaderSignature)
	out.Header.Del(HeaderOwner)
	out.Header.Del(HeaderSequence)
	seq := fence.SequenceFromContext(fence.SequenceContext(req.Context(), t.Lease))
	if seq != 0 {
		out.Header.Set(HeaderSequence, strconv.FormatUint(seq, 10))
	}
	if o, ok := t.Lease.(fence.Owned); ok && o.Owner() != "" {
		out.Header.Set(HeaderOwner, o.Owner())
	}
	if s, ok := t.Lease.(Signed); ok && s.Signature() != "" {
		out.Header.Set(HeaderSignature, s.Signature())
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	resp, err := base.RoundTrip(out)
	if err != nil {
		if seq != 0 {
			// The request may have arrived; with its sequence, sending it
			// again (fence.Retry) cannot apply it twice.
			err = fmt.Errorf("%w: %w", fence.ErrUnknownOutcome, err)
		}
		return resp, err
	}
	if stale, ok := StaleFromResponse(resp); ok {
		t.Lease.MarkLost(stale)
	}
	return resp, nil
}
