package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/internal/gen/fenced/v1"
	"github.com/fencedio/fenced/internal/gen/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/lease"
)

type service struct{ s *Server }

var _ fencedv1connect.LeaseServiceHandler = (*service)(nil)

func (s *Server) handlerOptions() []connect.HandlerOption {
	return append(s.codecs(),
		connect.WithReadMaxBytes(int(s.cfg.MaxBodyBytes)),
		// Lease messages are a few hundred bytes; compressing them costs
		// more CPU than it saves on the wire.
		connect.WithCompressMinBytes(4<<10),
		connect.WithInterceptors(s.observeRequests(), s.authInterceptor()),
	)
}

// observeRequests records latency per method and counts results.
func (s *Server) observeRequests() connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			start := time.Now()
			resp, err := next(ctx, req)
			method := req.Spec().Procedure[strings.LastIndexByte(req.Spec().Procedure, '/')+1:]
			s.metrics.requests.WithLabelValues(method).Observe(time.Since(start).Seconds())
			return resp, err
		}
	})
}

func result(err error, ok string) string {
	var held *lease.HeldError
	switch {
	case err == nil:
		return ok
	case errors.As(err, &held):
		return "held"
	case errors.Is(err, lease.ErrNotHeld):
		return "not_found"
	case errors.Is(err, errInvalid):
		return "invalid"
	}
	return "error"
}

func (v *service) Acquire(ctx context.Context, req *connect.Request[fencedv1.AcquireRequest]) (*connect.Response[fencedv1.AcquireResponse], error) {
	m := req.Msg
	owner, err := v.s.authorizeAcquire(ctx, m.GetKey(), m.GetOwner())
	var (
		l         lease.Lease
		ttl, wait time.Duration
	)
	if err == nil {
		ttl, wait, err = acquireTimes(m)
	}
	if err == nil {
		l, err = v.s.Acquire(ctx, m.GetKey(), owner, ttl, wait)
	}
	v.s.metrics.acquisitions.WithLabelValues(result(err, "granted")).Inc()
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&fencedv1.AcquireResponse{Lease: v.s.currentLease(l, holderView), TokenSignature: v.s.signature(l.Key, l.Token)}), nil
}

func (v *service) Renew(ctx context.Context, req *connect.Request[fencedv1.RenewRequest]) (*connect.Response[fencedv1.RenewResponse], error) {
	err := v.s.authorizeRenew(ctx, req.Msg.GetKey(), req.Msg.GetLeaseId())
	var l lease.Lease
	if err == nil {
		l, err = v.s.Renew(ctx, req.Msg.GetKey(), req.Msg.GetLeaseId())
	}
	v.s.metrics.countRenewal(err)
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&fencedv1.RenewResponse{Lease: wireLease(l, l.TTL, holderView), TokenSignature: v.s.signature(l.Key, l.Token)}), nil
}

func (v *service) Release(ctx context.Context, req *connect.Request[fencedv1.ReleaseRequest]) (*connect.Response[fencedv1.ReleaseResponse], error) {
	err := v.s.authorizeRenew(ctx, req.Msg.GetKey(), req.Msg.GetLeaseId())
	if err == nil {
		err = v.s.Release(ctx, req.Msg.GetKey(), req.Msg.GetLeaseId())
	}
	v.s.metrics.releases.WithLabelValues(result(err, "released")).Inc()
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&fencedv1.ReleaseResponse{}), nil
}

func (v *service) Get(ctx context.Context, req *connect.Request[fencedv1.GetRequest]) (*connect.Response[fencedv1.GetResponse], error) {
	key := req.Msg.GetKey()
	if err := validateKey(key); err != nil {
		return nil, connectError(err)
	}
	if _, err := v.s.authorize(ctx, PermRead, key); err != nil {
		return nil, connectError(err)
	}
	if !v.s.ready.Load() {
		return nil, connectError(errNotReady)
	}
	return v.get(req.Msg)
}

// get answers a Get from this node's state, whatever its role.
func (v *service) get(req *fencedv1.GetRequest) (*connect.Response[fencedv1.GetResponse], error) {
	key := req.GetKey()
	if err := validateKey(key); err != nil {
		return nil, connectError(err)
	}
	var (
		l    lease.Lease
		ok   bool
		last uint64
		rev  uint64
	)
	v.s.fsm.read(func(st *lease.State) {
		l, ok = st.Get(key)
		last = st.LastToken(key)
		rev = readRevision(st)
	})
	resp := &fencedv1.GetResponse{LastToken: last, Revision: rev}
	if ok {
		resp.Lease = v.s.currentLease(l, publicView)
	}
	return connect.NewResponse(resp), nil
}

func (v *service) List(ctx context.Context, req *connect.Request[fencedv1.ListRequest]) (*connect.Response[fencedv1.ListResponse], error) {
	prefix, limit := req.Msg.GetPrefix(), int(req.Msg.GetLimit())
	if len(prefix) > 0 {
		if err := validateKey(prefix); err != nil {
			return nil, connectError(fmt.Errorf("prefix: %w", err))
		}
	}
	if limit < 0 {
		return nil, connectError(invalidf("limit %d is negative", limit))
	}
	if _, err := v.s.authorize(ctx, PermRead, prefix); err != nil {
		return nil, connectError(err)
	}
	if !v.s.ready.Load() {
		return nil, connectError(errNotReady)
	}
	return v.list(req.Msg)
}

// list answers a List from this node's state, whatever its role.
func (v *service) list(req *fencedv1.ListRequest) (*connect.Response[fencedv1.ListResponse], error) {
	prefix, limit := req.GetPrefix(), int(req.GetLimit())
	if len(prefix) > 0 {
		if err := validateKey(prefix); err != nil {
			return nil, connectError(fmt.Errorf("prefix: %w", err))
		}
	}
	if limit < 0 {
		return nil, connectError(invalidf("limit %d is negative", limit))
	}
	if limit == 0 || limit > v.s.cfg.ListLimit {
		limit = v.s.cfg.ListLimit
	}
	view := v.s.fsm.view()
	leases := view.List(prefix, limit)
	remaining := v.s.expirer.remainingOf(leases, v.s.expirer.now())
	resp := &fencedv1.ListResponse{Leases: make([]*fencedv1.Lease, len(leases)), Revision: max(view.Applied(), 1)}
	for i, l := range leases {
		resp.Leases[i] = wireLease(l, remaining[i], publicView)
	}
	return connect.NewResponse(resp), nil
}

func (v *service) Watch(ctx context.Context, req *connect.Request[fencedv1.WatchRequest], stream *connect.ServerStream[fencedv1.WatchResponse]) error {
	prefix := req.Msg.GetPrefix()
	if len(prefix) > 0 {
		if err := validateKey(prefix); err != nil {
			return connectError(fmt.Errorf("prefix: %w", err))
		}
	}
	if _, err := v.s.authorize(ctx, PermWatch, prefix); err != nil {
		return connectError(err)
	}
	release, err := v.s.watchers.acquire(clientIP(req.Peer().Addr))
	if err != nil {
		return connectError(err)
	}
	defer release()
	// Every send must finish within StreamWriteTimeout: a watcher that
	// stops reading is cut off instead of holding its goroutine forever.
	// A batch of queued events is flushed once, after its last event.
	ctl := streamControlFrom(ctx)
	send := func(m *fencedv1.WatchResponse, more bool) error {
		ctl.beforeSend(v.s.cfg.StreamWriteTimeout, more)
		return stream.Send(m)
	}
	resync := func() error {
		return send(&fencedv1.WatchResponse{Event: &fencedv1.Event{Type: fencedv1.Event_RESYNC, Revision: v.s.fsm.view().Applied()}}, false)
	}
	// A node behind the one the watcher left may apply events at or below
	// afterRevision only after the subscription: they were delivered already.
	after := req.Msg.GetAfterRevision()
	sendAll := func(evs []*hubEvent) error {
		for len(evs) > 0 && evs[0].Revision <= after {
			evs = evs[1:]
		}
		for i, ev := range evs {
			if err := send(ev.watch, i < len(evs)-1); err != nil {
				return err
			}
		}
		return nil
	}
	sub, replay, complete := v.s.hub.subscribe(prefix, after)
	defer func() { v.s.hub.unsubscribe(sub) }()
	if !complete {
		if err := resync(); err != nil {
			return err
		}
	}
	if err := sendAll(replay); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sub.ready:
			if err := sendAll(sub.take()); err != nil {
				return err
			}
		case <-sub.lost:
			// Fell behind: deliver what was queued, then say so and start
			// again from now.
			if err := sendAll(sub.take()); err != nil {
				return err
			}
			sub, _, _ = v.s.hub.subscribe(prefix, 0)
			if err := resync(); err != nil {
				return err
			}
		}
	}
}

// KeepAlive renews leases from a stream of requests, answering each in
// order. A failed renewal is reported in its answer; the stream goes on.
func (v *service) KeepAlive(ctx context.Context, stream *connect.BidiStream[fencedv1.KeepAliveRequest, fencedv1.KeepAliveResponse]) error {
	for {
		req, err := stream.Receive()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		err = v.s.authorizeRenew(ctx, req.GetKey(), req.GetLeaseId())
		var l lease.Lease
		if err == nil {
			l, err = v.s.Renew(ctx, req.GetKey(), req.GetLeaseId())
		}
		v.s.metrics.countRenewal(err)
		resp := &fencedv1.KeepAliveResponse{}
		var ce *connect.Error
		if errors.As(connectError(err), &ce) {
			resp.ErrorCode, resp.ErrorMessage = ce.Code().String(), ce.Message()
		} else {
			resp.Lease = wireLease(l, l.TTL, holderView) // just renewed: its full TTL is left
			resp.TokenSignature = v.s.signature(l.Key, l.Token)
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}
