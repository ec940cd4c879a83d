package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"connectrpc.com/connect"
	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/internal/failpoint"
	fencedv1 "github.com/fencedio/fenced/internal/gen/fenced/v1"
	"github.com/fencedio/fenced/internal/gen/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/lease"
)

// Input limits of the wire contract.
const (
	MaxKeyBytes   = fence.MaxScopeBytes
	MaxOwnerBytes = 256
	maxIDBytes    = 64
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
	msg, err := v.s.authorizeAcquire(ctx, req.Msg)
	var l lease.Lease
	if err == nil {
		l, err = v.s.Acquire(ctx, msg)
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

// view says whose answer a lease goes into. The lease ID is the capability
// that renews and releases a lease (invariant I4), so it goes only to its
// holder: in the answers to Acquire, Renew and KeepAlive. Everyone else (Get,
// List, Watch, the dashboard) sees the public view, which leaves it out.
type view bool

const (
	publicView view = false
	holderView view = true
)

// wireLease is the one conversion of a lease to its wire form; remaining is
// the time left as this node sees it (0 when not applicable).
func wireLease(l lease.Lease, remaining time.Duration, v view) *fencedv1.Lease {
	p := &fencedv1.Lease{Key: l.Key, Owner: l.Owner, Token: l.Token,
		TtlMs: l.TTL.Milliseconds(), RemainingMs: remaining.Milliseconds()}
	if v == holderView {
		p.LeaseId = l.ID
	}
	return p
}

// currentLease is wireLease for a current lease, with the time it has left.
func (s *Server) currentLease(l lease.Lease, v view) *fencedv1.Lease {
	return wireLease(l, s.expirer.remaining(l.Key, s.expirer.now()), v)
}

func eventToProto(ev lease.Event) *fencedv1.Event {
	l := ev.Lease
	e := &fencedv1.Event{Revision: ev.Revision, Lease: wireLease(l, 0, publicView)}
	switch ev.Type {
	case lease.Acquired:
		e.Type = fencedv1.Event_ACQUIRED
	case lease.Released:
		e.Type = fencedv1.Event_RELEASED
	case lease.Expired:
		e.Type = fencedv1.Event_EXPIRED
	}
	return e
}

// Acquire grants req.Key or, with WaitMs, waits in line for it.
//
// If ctx ends while the grant is being written, the grant may still take
// effect; the lease then expires after its TTL.
func (s *Server) Acquire(ctx context.Context, req *fencedv1.AcquireRequest) (lease.Lease, error) {
	holder := s.quotaHolder(ctx, req.GetOwner())
	l, err := s.acquire(ctx, req, holder)
	if err == nil && l.Owner != holder {
		s.overrides.add(holder, l.Key, l.ID, s.fsm)
	}
	return l, err
}

// acquire is Acquire counted against holder's quotas (quota.go).
func (s *Server) acquire(ctx context.Context, req *fencedv1.AcquireRequest, holder string) (lease.Lease, error) {
	key, owner := req.GetKey(), req.GetOwner()
	if err := validateKey(key); err != nil {
		return lease.Lease{}, err
	}
	if err := validateOwner(owner); err != nil {
		return lease.Lease{}, err
	}
	ttl := time.Duration(req.GetTtlMs()) * time.Millisecond
	switch {
	case req.GetTtlMs() <= 0:
		return lease.Lease{}, invalidf("ttlMs is required and must be positive, got %d", req.GetTtlMs())
	case ttl < s.cfg.MinTTL || ttl > s.cfg.MaxTTL || req.GetTtlMs() > int64(s.cfg.MaxTTL/time.Millisecond):
		return lease.Lease{}, invalidf("ttlMs %d is outside the allowed range %d..%d", req.GetTtlMs(),
			s.cfg.MinTTL.Milliseconds(), s.cfg.MaxTTL.Milliseconds())
	}
	wait := time.Duration(req.GetWaitMs()) * time.Millisecond
	if req.GetWaitMs() < 0 || req.GetWaitMs() > int64(s.cfg.MaxWait/time.Millisecond) {
		return lease.Lease{}, invalidf("waitMs %d is outside the allowed range 0..%d", req.GetWaitMs(), s.cfg.MaxWait.Milliseconds())
	}
	c := lease.Command{Op: lease.OpAcquire, Key: key, Owner: owner, TTL: ttl}
	if wait == 0 {
		return s.tryAcquire(c, holder)
	}

	if err := s.checkLeaseQuota(owner, holder); err != nil {
		return lease.Lease{}, err
	}
	caller := ctx
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	w, err := s.waiters.enqueueLimited(key, &c, holder, s.holderKind(), s.cfg.MaxWaitersPerOwner)
	if err != nil {
		return lease.Lease{}, err
	}
	defer s.waiters.leave(key, w)
	var lastErr error = &lease.HeldError{Key: key}
	for {
		l, granted, head := s.waiters.turn(key, w)
		if granted {
			return l, nil
		}
		if head {
			l, err := s.tryAcquire(c, holder)
			if err == nil {
				return l, nil
			}
			if !errors.Is(err, lease.ErrHeld) && !errors.Is(err, errNotReady) {
				return s.giveUp(key, w, err)
			}
			lastErr = err
		}
		select {
		case <-w.ready:
		case <-ctx.Done():
			if err := caller.Err(); err != nil {
				// The caller's deadline (or cancellation) cut the wait, not
				// waitMs: answer with that (deadline_exceeded), never with
				// "held", so that the caller sees one error whether its own
				// timer or this answer comes first.
				return s.giveUp(key, w, err)
			}
			return s.giveUp(key, w, lastErr)
		}
	}
}

// giveUp leaves the line with err, unless the key was handed to the waiter
// meanwhile: then the grant stands and is returned. A handover to it that
// is still being applied is waited for, however long the wait was meant to
// be: the grant it may make is this waiter's, and nobody else learns its
// lease ID.
func (s *Server) giveUp(key string, w *waiter, err error) (lease.Lease, error) {
	for {
		l, granted, inFlight := s.waiters.abandon(key, w)
		if granted {
			return l, nil
		}
		if !inFlight {
			break
		}
		<-w.ready // settle signals once the handover is decided
	}
	if errors.Is(err, lease.ErrHeld) {
		err = s.refreshHeld(key, err)
	}
	return lease.Lease{}, err
}

func (s *Server) tryAcquire(c lease.Command, holder string) (lease.Lease, error) {
	if !s.ready.Load() {
		return lease.Lease{}, errNotReady
	}
	var (
		cur   lease.Lease
		held  bool
		count int
	)
	s.fsm.read(func(st *lease.State) {
		cur, held = st.Get(c.Key)
		count = st.Len()
	})
	if held && failpoint.Enabled(failpoint.GrantHeld) && failpoint.OneIn(16) {
		_, _ = s.apply(lease.Command{Op: lease.OpExpire, Key: cur.Key, ID: cur.ID})
		held = false
	}
	if held {
		return lease.Lease{}, &lease.HeldError{Key: cur.Key, Owner: cur.Owner, Token: cur.Token,
			Remaining: s.expirer.remaining(cur.Key, s.expirer.now())}
	}
	if count >= s.cfg.MaxLeases {
		return lease.Lease{}, fmt.Errorf("%w: the server holds %d leases (limit %d)", errTooManyLeases, count, s.cfg.MaxLeases)
	}
	if err := s.checkLeaseQuota(c.Owner, holder); err != nil {
		return lease.Lease{}, err
	}
	c.ID = newLeaseID()
	res, err := s.apply(c)
	if err != nil {
		return lease.Lease{}, err
	}
	if res.Err != nil {
		return lease.Lease{}, s.refreshHeld(c.Key, res.Err)
	}
	return res.Event.Lease, nil
}

// refreshHeld fills in the remaining TTL of a held error.
func (s *Server) refreshHeld(key string, err error) error {
	var held *lease.HeldError
	if errors.As(err, &held) {
		var cur lease.Lease
		var ok bool
		s.fsm.read(func(st *lease.State) { cur, ok = st.Get(key) })
		if ok {
			return &lease.HeldError{Key: key, Owner: cur.Owner, Token: cur.Token, Remaining: s.expirer.remaining(key, s.expirer.now())}
		}
	}
	return err
}

// Renew extends lease id of key by its TTL. It is not written to the log:
// the leader confirms it still leads, then moves the deadline.
func (s *Server) Renew(ctx context.Context, key, id string) (lease.Lease, error) {
	if err := validateKey(key); err != nil {
		return lease.Lease{}, err
	}
	if err := validateID(id); err != nil {
		return lease.Lease{}, err
	}
	mutant := failpoint.Enabled(failpoint.DeposedLeaderRenews) && s.everLed.Load()
	if !s.ready.Load() && !mutant {
		return lease.Lease{}, errNotReady
	}
	start := s.expirer.now()
	if err := s.leader.confirm(); err != nil && !mutant {
		return lease.Lease{}, err
	}
	// The deadline counts from before the leadership check: a renewal never
	// outlives what the confirmed leadership covers.
	l, err := s.expirer.renew(key, id, start)
	if err != nil {
		return lease.Lease{}, describeNotHeld(err, key, id)
	}
	if s.log.Enabled(ctx, slog.LevelDebug) {
		s.log.Debug("lease renewed", "scope", l.Key, "owner", l.Owner, "lease_id", idFingerprint(l.ID), "token", l.Token)
	}
	return l, nil
}

// Release ends lease id of key.
func (s *Server) Release(ctx context.Context, key, id string) error {
	if err := validateKey(key); err != nil {
		return err
	}
	if err := validateID(id); err != nil {
		return err
	}
	if !s.ready.Load() {
		return errNotReady
	}
	var err error
	s.fsm.read(func(st *lease.State) { _, err = st.Current(key, id) })
	if failpoint.Enabled(failpoint.ReleaseAnyID) {
		s.fsm.read(func(st *lease.State) {
			if cur, ok := st.Get(key); ok {
				id, err = cur.ID, nil
			}
		})
	}
	if err != nil {
		return describeNotHeld(err, key, id)
	}
	res, err := s.applyHandover(lease.Command{Op: lease.OpRelease, Key: key, ID: id}, s.apply)
	if err != nil {
		return err
	}
	return describeNotHeld(res.Err, key, id)
}

// validateKey applies fence.ValidateScope: a key is the scope its tokens
// fence, so the service and every guard share one rule, and the service
// never issues a token that a guard would refuse for its scope.
func validateKey(key string) error {
	var se *fence.ScopeError
	if err := fence.ValidateScope(key); errors.As(err, &se) {
		return invalidf("key %s", se.Reason)
	}
	return nil
}

func validateOwner(owner string) error {
	if len(owner) > MaxOwnerBytes {
		return invalidf("owner is %d bytes, the limit is %d", len(owner), MaxOwnerBytes)
	}
	return validateText("owner", owner)
}

func validateID(id string) error {
	if id == "" {
		return invalidf("leaseId is required")
	}
	if len(id) > maxIDBytes {
		return invalidf("leaseId is %d bytes, the limit is %d", len(id), maxIDBytes)
	}
	return validateText("leaseId", id)
}

// validateText accepts printable UTF-8: no control characters, no NUL.
func validateText(field, s string) error {
	if !utf8.ValidString(s) {
		return invalidf("%s is not valid UTF-8", field)
	}
	for i, r := range s {
		if !unicode.IsGraphic(r) {
			return invalidf("%s has a non-printable character %U at byte %d", field, r, i)
		}
	}
	return nil
}

// limitBody refuses unary request bodies above max with invalid_argument
// before any of it reaches a handler. Bodies of unknown length are read up
// to the limit first. Streams (gRPC, and Connect's application/connect+...)
// are left to connect's per-message read limit, which answers
// resource_exhausted as gRPC clients expect.
func limitBody(next http.Handler, max int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ct := r.Header.Get("Content-Type")
		if strings.HasPrefix(ct, "application/grpc") || strings.HasPrefix(ct, "application/connect+") {
			next.ServeHTTP(w, r)
			return
		}
		size := r.ContentLength
		if size < 0 && r.Body != nil {
			body, err := io.ReadAll(io.LimitReader(r.Body, max+1))
			if err != nil {
				http.Error(w, "reading request body: "+err.Error(), http.StatusBadRequest)
				return
			}
			size = int64(len(body))
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = size
		}
		if size > max {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"code":"invalid_argument","message":"request body exceeds the limit of %d bytes"}`, max)
			return
		}
		next.ServeHTTP(w, r)
	})
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
