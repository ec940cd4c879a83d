package fenceconnect

import (
	"context"
	"net/http"

	"connectrpc.com/connect"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencehttp"
	"github.com/fencedio/fenced/fence/internal/guarded"
)

// InterceptorConfig configures NewInterceptor; a zero field means the
// default documented on it.
type InterceptorConfig struct {
	// Procedures fences only the procedures for which it returns true; the
	// others pass through without a token. It gets the full procedure name,
	// such as "/acme.store.v1.StoreService/Put". Default: every procedure
	// is fenced, so a read that should not need a token must be exempted
	// here.
	Procedures func(procedure string) bool
}

// NewInterceptor returns a handler-side interceptor that runs every fenced
// call inside g.Do with the scope and token from the fencing-scope and
// fencing-token request headers (gRPC metadata for gRPC clients).
//
// Missing or malformed headers fail with invalid_argument, a stale token
// with failed_precondition carrying a detail that StaleFromError decodes,
// a duplicate fencing-sequence with already_exists and a gap with
// failed_precondition, each with a detail that SequenceFromError decodes,
// and a failing guard with unavailable; in all these cases the handler is
// not called. An error returned by the handler is passed on unchanged and
// the token is not recorded.
//
// Unary calls: the handler runs inside g.Do; the token is recorded when it
// returns without error.
//
// Streaming calls (client, server and bidirectional streams): the token is
// checked once, from the headers at the start of the stream, and the whole
// handler runs inside g.Do; the token is recorded when it returns nil. The
// scope stays locked for the life of the stream, so other writers of the
// scope wait until it ends. This keeps every effect of the stream fenced;
// checking only at the start would let a stream keep writing after a newer
// holder has written. Give streams deadlines, and exempt long-lived reads
// (watches) with InterceptorConfig.Procedures.
//
// A panic in a handler is recovered inside g.Do, so the guard records
// nothing and releases the scope, and is then raised again.
//
// The interceptor does nothing on the client side; see NewClientInterceptor.
func NewInterceptor(g fence.Guard, cfg InterceptorConfig) connect.Interceptor {
	if g == nil {
		panic("fenceconnect: NewInterceptor with a nil Guard")
	}
	i := &serverInterceptor{guard: g, fenced: cfg.Procedures}
	if i.fenced == nil {
		i.fenced = func(string) bool { return true }
	}
	return i
}

type serverInterceptor struct {
	guard  fence.Guard
	fenced func(procedure string) bool
}

var _ connect.Interceptor = (*serverInterceptor)(nil)

func (i *serverInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		spec := req.Spec()
		if spec.IsClient || !i.fenced(spec.Procedure) {
			return next(ctx, req)
		}
		var resp connect.AnyResponse
		err := i.do(ctx, req.Header(), func(ctx context.Context) (err error) {
			resp, err = next(ctx, req)
			return err
		})
		if err != nil {
			return nil, err
		}
		return resp, nil
	}
}

func (i *serverInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i *serverInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if !i.fenced(conn.Spec().Procedure) {
			return next(ctx, conn)
		}
		return i.do(ctx, conn.RequestHeader(), func(ctx context.Context) error {
			return next(ctx, conn)
		})
	}
}

// do runs handler under the guard and returns the error to answer with.
func (i *serverInterceptor) do(ctx context.Context, h http.Header, handler func(context.Context) error) error {
	scope, token, err := fencehttp.FromHeader(h)
	if err != nil {
		return NewError(err)
	}
	seq, err := fencehttp.SequenceFromHeader(h)
	if err != nil {
		return NewError(err)
	}
	if seq != 0 {
		ctx = fence.WithSequence(ctx, seq)
	}
	ctx = fence.WithOwner(ctx, fencehttp.OwnerFromHeader(h))
	if sig := h.Get(fencehttp.HeaderSignature); sig != "" {
		ctx = fence.WithSignature(ctx, sig)
	}
	ran, handlerErr, err := guarded.Do(ctx, i.guard, scope, token, handler)
	switch {
	case err == nil:
		return nil
	case ran && handlerErr != nil:
		return handlerErr // the handler's own answer, untouched
	default:
		// Refused before the handler ran, or the guard failed to record
		// after it succeeded: either way the client must not see success.
		return NewError(err)
	}
}
