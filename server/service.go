package server

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/admission"
	"github.com/fencedio/fenced/server/internal/apierr"
	"github.com/fencedio/fenced/server/internal/fanout"
	"github.com/fencedio/fenced/server/internal/fsm"
	"github.com/fencedio/fenced/server/internal/rejections"
	"github.com/fencedio/fenced/server/internal/streamwrite"
)

// service serves the lease API from this node's own state; routedService
// decides, call by call, whether this node or the leader serves it.
type service struct{ s *Server }

func (s *Server) handlerOptions() []connect.HandlerOption {
	return append(fanout.Codecs(s.hub),
		connect.WithReadMaxBytes(int(s.cfg.MaxBodyBytes)),
		// Lease messages are a few hundred bytes, and a List page of 100
		// leases about 10 KiB: compressing them costs more CPU (a quarter
		// of the server's, with clients looping List) than it saves on the
		// wire. Only large Lists are compressed.
		connect.WithCompressMinBytes(64<<10),
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
	case errors.Is(err, apierr.ErrInvalid):
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
	v.s.metrics.countRefusal(err)
	if err != nil {
		return nil, apierr.Connect(err)
	}
	return connect.NewResponse(&fencedv1.AcquireResponse{Lease: v.s.currentLease(l, holderView), TokenSignature: v.s.signature(l.Key, l.Token)}), nil
}

func (v *service) Renew(ctx context.Context, req *connect.Request[fencedv1.RenewRequest]) (*connect.Response[fencedv1.RenewResponse], error) {
	l, err := v.renew(ctx, req.Msg.GetKey(), req.Msg.GetLeaseId())
	if err != nil {
		return nil, apierr.Connect(err)
	}
	return connect.NewResponse(&fencedv1.RenewResponse{Lease: renewedLease(l), TokenSignature: v.s.signature(l.Key, l.Token)}), nil
}

// renew authorizes and makes one renewal, and counts it.
func (v *service) renew(ctx context.Context, key, id string) (lease.Lease, error) {
	b := [1]renewal{{key: key, id: id}}
	v.renewBatch(ctx, b[:])
	return b[0].lease, b[0].err
}

// renewBatch authorizes and makes the renewals of b, and counts them.
func (v *service) renewBatch(ctx context.Context, b []renewal) {
	for i := range b {
		b[i].err = v.s.authorizeRenew(ctx, b[i].key, b[i].id)
	}
	v.s.renewBatch(ctx, b)
	for i := range b {
		v.s.metrics.countRenewal(b[i].err)
	}
}

// keepAliveAnswer is KeepAlive's answer to a renewal that returned l, err:
// a failure is reported in the answer, and the stream goes on.
func (v *service) keepAliveAnswer(l lease.Lease, err error) *fencedv1.KeepAliveResponse {
	resp := &fencedv1.KeepAliveResponse{}
	var ce *connect.Error
	if errors.As(apierr.Connect(err), &ce) {
		resp.ErrorCode, resp.ErrorMessage = ce.Code().String(), ce.Message()
	} else {
		resp.Lease, resp.TokenSignature = renewedLease(l), v.s.signature(l.Key, l.Token)
	}
	return resp
}

func (v *service) Release(ctx context.Context, req *connect.Request[fencedv1.ReleaseRequest]) (*connect.Response[fencedv1.ReleaseResponse], error) {
	err := v.s.authorizeRenew(ctx, req.Msg.GetKey(), req.Msg.GetLeaseId())
	if err == nil {
		err = v.s.Release(ctx, req.Msg.GetKey(), req.Msg.GetLeaseId())
	}
	v.s.metrics.releases.WithLabelValues(result(err, "released")).Inc()
	if err != nil {
		return nil, apierr.Connect(err)
	}
	return connect.NewResponse(&fencedv1.ReleaseResponse{}), nil
}

func (v *service) Get(ctx context.Context, req *connect.Request[fencedv1.GetRequest]) (*connect.Response[fencedv1.GetResponse], error) {
	return read(ctx, v.s, req.Msg, false, v.checkGet, v.get)
}

// read answers a read from this node's state once check passes; unless
// stale, only while this node serves (it leads and its state is current).
func read[Req, Resp any](ctx context.Context, s *Server, req *Req, stale bool,
	check func(context.Context, *Req) error, answer func(*Req) (*connect.Response[Resp], error),
) (*connect.Response[Resp], error) {
	if err := check(ctx, req); err != nil {
		return nil, err
	}
	if !stale && !s.Ready() {
		return nil, apierr.Connect(apierr.ErrNotReady)
	}
	release, err := s.reads.Acquire(ctx)
	if err != nil {
		return nil, apierr.Connect(err)
	}
	defer release()
	return answer(req)
}

// checkGet checks a Get's key and that the caller may read it.
func (v *service) checkGet(ctx context.Context, req *fencedv1.GetRequest) error {
	if err := validateKey(req.GetKey()); err != nil {
		return apierr.Connect(err)
	}
	_, err := v.s.authorize(ctx, PermRead, req.GetKey())
	return apierr.Connect(err)
}

// get answers a checked Get from this node's state, whatever its role.
func (v *service) get(req *fencedv1.GetRequest) (*connect.Response[fencedv1.GetResponse], error) {
	key := req.GetKey()
	var (
		l    lease.Lease
		ok   bool
		last uint64
		rev  uint64
	)
	v.s.fsm.Read(func(st *lease.State) {
		l, ok = st.Get(key)
		last = st.LastToken(key)
		rev = fsm.ReadRevision(st)
	})
	resp := &fencedv1.GetResponse{LastToken: last, Revision: rev}
	if ok {
		resp.Lease = v.s.currentLease(l, publicView)
	}
	return connect.NewResponse(resp), nil
}

func (v *service) List(ctx context.Context, req *connect.Request[fencedv1.ListRequest]) (*connect.Response[fencedv1.ListResponse], error) {
	return read(ctx, v.s, req.Msg, false, v.checkList, v.list)
}

// checkList checks a List's prefix and limit and that the caller may read
// under the prefix.
func (v *service) checkList(ctx context.Context, req *fencedv1.ListRequest) error {
	if err := validatePrefix(req.GetPrefix()); err != nil {
		return apierr.Connect(err)
	}
	if req.GetLimit() < 0 {
		return apierr.Connect(apierr.Invalidf("limit %d is negative", req.GetLimit()))
	}
	_, err := v.s.authorize(ctx, PermRead, req.GetPrefix())
	return apierr.Connect(err)
}

// list answers a checked List from this node's state, whatever its role.
func (v *service) list(req *fencedv1.ListRequest) (*connect.Response[fencedv1.ListResponse], error) {
	prefix, limit := req.GetPrefix(), int(req.GetLimit())
	if limit == 0 || limit > v.s.cfg.ListLimit {
		limit = v.s.cfg.ListLimit
	}
	view := v.s.fsm.View()
	leases := view.List(prefix, limit)
	remaining := v.s.expirer.RemainingOf(leases, v.s.expirer.Now())
	resp := &fencedv1.ListResponse{Leases: make([]*fencedv1.Lease, len(leases)), Revision: max(view.Applied(), 1)}
	for i, l := range leases {
		resp.Leases[i] = wireLease(l, remaining[i], publicView)
	}
	return connect.NewResponse(resp), nil
}

func (v *service) Watch(ctx context.Context, req *connect.Request[fencedv1.WatchRequest], stream *connect.ServerStream[fencedv1.WatchResponse]) error {
	if req.Header().Get(rejections.RelayHeader) != "" {
		return v.s.serveRelay(ctx, stream) // another node, on the peer port
	}
	prefix := req.Msg.GetPrefix()
	if err := validatePrefix(prefix); err != nil {
		return apierr.Connect(err)
	}
	if _, err := v.s.authorize(ctx, PermWatch, prefix); err != nil {
		return apierr.Connect(err)
	}
	release, err := v.s.watchers.Acquire(admission.ClientIP(req.Peer().Addr))
	if err != nil {
		return apierr.Connect(err)
	}
	defer release()
	if !v.s.awaitCatchUp(ctx) {
		return nil
	}
	// Without after_revision the stream starts at the state this node has
	// applied now: a transition applied before the call but not yet
	// dispatched to the watchers is not sent.
	after := req.Msg.GetAfterRevision()
	if after == 0 {
		after = v.s.fsm.Revision()
	}
	sendAll, resync := v.watchSenders(ctx, req, stream, &after)
	if req.Msg.GetRejections() {
		defer v.s.relay.Join()()
	}
	sub, replay, complete := v.s.hub.Subscribe(prefix, after)
	sub.WantRejections(req.Msg.GetRejections())
	defer func() { v.s.hub.Unsubscribe(sub) }()
	if !complete {
		after = v.s.fsm.Revision()
		if err := resync(); err != nil {
			return err
		}
	}
	if len(replay) > 0 {
		if err := sendAll(nil, replay); err != nil {
			return err
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sub.Ready():
			if err := sendAll(sub, nil); err != nil {
				return err
			}
		case <-sub.Lost():
			// Fell behind: deliver what was queued, then say so and start
			// again from now.
			if err := sendAll(sub, nil); err != nil {
				return err
			}
			// The RESYNC's revision is the new start: the transitions
			// up to it that are still undispatched are not sent after it.
			after = v.s.fsm.Revision()
			sub, _, _ = v.s.hub.Subscribe(prefix, after)
			sub.WantRejections(req.Msg.GetRejections())
			if err := resync(); err != nil {
				return err
			}
		}
	}
}

// watchSenders returns a Watch stream's senders: sendAll sends the events
// queued for sub (taken once a fan-out slot is free), or replay when sub
// is nil, and resync a RESYNC event.
func (v *service) watchSenders(ctx context.Context, req *connect.Request[fencedv1.WatchRequest], stream *connect.ServerStream[fencedv1.WatchResponse],
	after *uint64,
) (sendAll func(sub *fanout.Subscription, replay []*fanout.Event) error, resync func() error) {
	// Every send must finish within StreamWriteTimeout: a watcher that
	// stops reading is cut off instead of holding its goroutine forever.
	// A batch of queued events is flushed once, after its last event.
	ctl := streamwrite.From(ctx)
	sent := false // connect has sent the headers
	send := func(m *fencedv1.WatchResponse, more bool) error {
		ctl.BeforeSend(v.s.cfg.StreamWriteTimeout, more)
		sent = true
		return stream.Send(m)
	}
	resync = func() error {
		return send(&fencedv1.WatchResponse{Event: &fencedv1.Event{Type: fencedv1.Event_RESYNC, Revision: *after}}, false)
	}
	// Once connect has sent the headers, a batch of events goes out in one
	// write below connect, where the stream control allows it.
	var writeFlush func([]byte) error
	if ctl != nil {
		writeFlush = func(b []byte) error { return ctl.WriteFlush(v.s.cfg.StreamWriteTimeout, b) }
	}
	batch := fanout.NewBatcher(req.Header().Get("Content-Type"), writeFlush)
	// The events are taken once a fan-out slot is ours (internal/sharegate): under
	// overload this watcher falls behind, and is shed with RESYNC past
	// WatchBuffer events, rather than the write path slowing down.
	sendAll = func(sub *fanout.Subscription, replay []*fanout.Event) error {
		release, err := v.s.fanout.Acquire(ctx)
		if err != nil {
			return nil // the stream is over: the loop below sees it
		}
		defer release()
		// A node behind the one the watcher left may apply events at or
		// below afterRevision only after the subscription: they were
		// delivered already.
		taken := replay
		if sub != nil {
			taken = sub.Take()
			defer sub.Recycle(taken)
		}
		evs := slices.DeleteFunc(taken, func(ev *fanout.Event) bool { return !ev.IsRejection() && ev.Revision <= *after })
		if !sent && len(evs) > 0 {
			if err := send(evs[0].Message(*after), len(evs) > 1); err != nil {
				return err
			}
			evs = evs[1:]
		}
		return batch(evs, func(ev *fanout.Event, more bool) error { return send(ev.Message(*after), more) })
	}
	return sendAll, resync
}

// adminService serves the AdminService (Revoke) from this node; routedAdmin
// decides where each call is served.
type adminService struct{ s *Server }

var _ fencedv1connect.AdminServiceHandler = (*adminService)(nil)

func (v *adminService) Revoke(ctx context.Context, req *connect.Request[fencedv1.RevokeRequest]) (*connect.Response[fencedv1.RevokeResponse], error) {
	key := req.Msg.GetKey()
	if err := validateKey(key); err != nil {
		return nil, apierr.Connect(err)
	}
	p, err := v.s.authorize(ctx, PermAdmin, key)
	if err != nil {
		return nil, apierr.Connect(err)
	}
	l, err := v.s.Revoke(ctx, key, p.Name)
	if err != nil {
		return nil, apierr.Connect(err)
	}
	return connect.NewResponse(&fencedv1.RevokeResponse{Lease: wireLease(l, 0, publicView), RevokedBy: p.Name}), nil
}
