package fenceconnect

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"

	"connectrpc.com/connect"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencehttp"
)

// Lease is the holder's side of a lease: *client.Lease satisfies it. It is
// fence.Lease (as is fencehttp.Lease), so one value serves every guard and
// transport; the name stays here so that existing code keeps compiling.
type Lease = fence.Lease

// NewClientInterceptor returns a client-side interceptor that sends the
// lease's key and token as the fencing-scope and fencing-token headers (and
// its owner as fencing-owner when the lease is fence.Owned) on every call (unary and streaming), replacing values set by the caller, and
// calls lease.MarkLost with the *fence.StaleTokenError when an answer is a
// stale-token rejection (see StaleFromError). The error is still returned to
// the caller. It never retries. A call whose context carries a sequence
// (fence.WithSequence, fence.Retry), or whose lease numbers its writes
// (fence.Sequenced), sends the sequence as fencing-sequence, and a
// unary call of it that fails without a known outcome returns an error
// matching fence.ErrUnknownOutcome; SequenceFromError tells a duplicate.
//
// For a stream, MarkLost is called at most once, for the first stale error any
// of its methods returns. Calls are not stopped after MarkLost; make them with
// the lease's context so that they are cancelled.
//
// The interceptor does nothing on the handler side; see NewInterceptor.
func NewClientInterceptor(lease Lease) connect.Interceptor {
	if lease == nil {
		panic("fenceconnect: NewClientInterceptor with a nil Lease")
	}
	return &clientInterceptor{lease: lease}
}

type clientInterceptor struct{ lease Lease }

var _ connect.Interceptor = (*clientInterceptor)(nil)

func (c *clientInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if !req.Spec().IsClient {
			return next(ctx, req)
		}
		seq := fence.SequenceFromContext(fence.SequenceContext(ctx, c.lease))
		c.attach(req.Header(), seq)
		resp, err := next(ctx, req)
		if stale, ok := StaleFromError(err); ok {
			c.lease.MarkLost(stale)
		}
		if seq != 0 && unknownOutcome(err) {
			err = fmt.Errorf("%w: %w", fence.ErrUnknownOutcome, err)
		}
		return resp, err
	}
}

func (c *clientInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		// Headers go out with the first Send, which the caller has not made yet.
		c.attach(conn.RequestHeader(), fence.SequenceFromContext(fence.SequenceContext(ctx, c.lease)))
		return &clientConn{StreamingClientConn: conn, lease: c.lease}
	}
}

func (c *clientInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// unknownOutcome reports whether a sequenced unary call that failed with
// err may have been applied: the answer was lost (unavailable, unknown,
// deadline_exceeded, canceled, internal). Sending it again with its
// sequence cannot apply it twice.
func unknownOutcome(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeUnknown, connect.CodeDeadlineExceeded, connect.CodeCanceled, connect.CodeInternal:
		return err != nil
	}
	return false
}

func (c *clientInterceptor) attach(h http.Header, seq uint64) {
	h.Del(fencehttp.HeaderSequence)
	if seq != 0 {
		h.Set(fencehttp.HeaderSequence, strconv.FormatUint(seq, 10))
	}
	h.Set(fencehttp.HeaderScope, c.lease.Key())
	h.Set(fencehttp.HeaderToken, strconv.FormatUint(c.lease.Token(), 10))
	h.Del(fencehttp.HeaderSignature)
	if s, ok := c.lease.(fencehttp.Signed); ok && s.Signature() != "" {
		h.Set(fencehttp.HeaderSignature, s.Signature())
	}
	h.Del(fencehttp.HeaderOwner)
	if o, ok := c.lease.(fence.Owned); ok && o.Owner() != "" {
		h.Set(fencehttp.HeaderOwner, o.Owner())
	}
}

// clientConn watches a stream's errors for a stale rejection.
type clientConn struct {
	connect.StreamingClientConn
	lease Lease
	lost  atomic.Bool // the read and write sides may report concurrently
}

func (c *clientConn) check(err error) error {
	if stale, ok := StaleFromError(err); ok && c.lost.CompareAndSwap(false, true) {
		c.lease.MarkLost(stale)
	}
	return err
}

func (c *clientConn) Send(msg any) error    { return c.check(c.StreamingClientConn.Send(msg)) }
func (c *clientConn) Receive(msg any) error { return c.check(c.StreamingClientConn.Receive(msg)) }
func (c *clientConn) CloseRequest() error   { return c.check(c.StreamingClientConn.CloseRequest()) }
func (c *clientConn) CloseResponse() error  { return c.check(c.StreamingClientConn.CloseResponse()) }
