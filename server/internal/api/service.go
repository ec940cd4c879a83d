package api

import (
	"context"
	"errors"
	"slices"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/admission"
	"github.com/fencedio/fenced/server/internal/apierr"
	"github.com/fencedio/fenced/server/internal/fanout"
	"github.com/fencedio/fenced/server/internal/rejections"
	"github.com/fencedio/fenced/server/internal/security"
	"github.com/fencedio/fenced/server/internal/streamwrite"
)

// service serves the lease API from this node's own state; routedService
// decides, call by call, whether this node or the leader serves it.
type service struct{ *Deps }

func (v *service) Acquire(ctx context.Context, req *connect.Request[fencedv1.AcquireRequest]) (*connect.Response[fencedv1.AcquireResponse], error) {
	m := req.Msg
	owner, err := v.Auth.AuthorizeAcquire(ctx, m.GetKey(), m.GetOwner())
	var (
		l         lease.Lease
		ttl, wait time.Duration
	)
	if err == nil {
		ttl, wait, err = acquireTimes(m)
	}
	if err == nil {
		l, err = v.Leases.Acquire(ctx, m.GetKey(), owner, ttl, wait)
	}
	v.Counts.CountAcquisition(err)
	if err != nil {
		return nil, apierr.Connect(err)
	}
	return connect.NewResponse(&fencedv1.AcquireResponse{Lease: v.currentLease(l, holderView), TokenSignature: v.Sign(l.Key, l.Token)}), nil
}

func (v *service) Renew(ctx context.Context, req *connect.Request[fencedv1.RenewRequest]) (*connect.Response[fencedv1.RenewResponse], error) {
	l, err := v.renew(ctx, req.Msg.GetKey(), req.Msg.GetLeaseId())
	if err != nil {
		return nil, apierr.Connect(err)
	}
	return connect.NewResponse(&fencedv1.RenewResponse{Lease: renewedLease(l), TokenSignature: v.Sign(l.Key, l.Token)}), nil
}

// renew authorizes and makes one renewal, and counts it.
func (v *service) renew(ctx context.Context, key, id string) (lease.Lease, error) {
	b := [1]Renewal{{Key: key, ID: id}}
	v.renewBatch(ctx, b[:])
	return b[0].Lease, b[0].Err
}

// renewBatch authorizes and makes the renewals of b, and counts them.
func (v *service) renewBatch(ctx context.Context, b []Renewal) {
	for i := range b {
		b[i].Err = v.Auth.AuthorizeRenew(ctx, b[i].Key, b[i].ID)
	}
	v.Leases.RenewBatch(ctx, b)
	for i := range b {
		v.Counts.CountRenewal(b[i].Err)
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
		resp.Lease, resp.TokenSignature = renewedLease(l), v.Sign(l.Key, l.Token)
	}
	return resp
}

func (v *service) Release(ctx context.Context, req *connect.Request[fencedv1.ReleaseRequest]) (*connect.Response[fencedv1.ReleaseResponse], error) {
	err := v.Auth.AuthorizeRenew(ctx, req.Msg.GetKey(), req.Msg.GetLeaseId())
	if err == nil {
		err = v.Leases.Release(ctx, req.Msg.GetKey(), req.Msg.GetLeaseId())
	}
	v.Counts.CountRelease(err)
	if err != nil {
		return nil, apierr.Connect(err)
	}
	return connect.NewResponse(&fencedv1.ReleaseResponse{}), nil
}

func (v *service) Get(ctx context.Context, req *connect.Request[fencedv1.GetRequest]) (*connect.Response[fencedv1.GetResponse], error) {
	return read(ctx, v.Deps, req.Msg, false, v.checkGet, v.get)
}

// read answers a read from this node's state once check passes; unless
// stale, only while this node serves (it leads and its state is current).
func read[Req, Resp any](ctx context.Context, d *Deps, req *Req, stale bool,
	check func(context.Context, *Req) error, answer func(*Req) (*connect.Response[Resp], error),
) (*connect.Response[Resp], error) {
	if err := check(ctx, req); err != nil {
		return nil, err
	}
	if !stale && !d.Leader.Ready() {
		return nil, apierr.Connect(apierr.ErrNotReady)
	}
	release, err := d.Reads.Acquire(ctx)
	if err != nil {
		return nil, apierr.Connect(err)
	}
	defer release()
	return answer(req)
}

// checkGet checks a Get's key and that the caller may read it.
func (v *service) checkGet(ctx context.Context, req *fencedv1.GetRequest) error {
	if err := ValidateKey(req.GetKey()); err != nil {
		return apierr.Connect(err)
	}
	_, err := v.Auth.Authorize(ctx, security.PermRead, req.GetKey())
	return apierr.Connect(err)
}

// get answers a checked Get from this node's state, whatever its role.
func (v *service) get(req *fencedv1.GetRequest) (*connect.Response[fencedv1.GetResponse], error) {
	l, ok, last, rev := v.State.Get(req.GetKey())
	resp := &fencedv1.GetResponse{LastToken: last, Revision: rev}
	if ok {
		resp.Lease = v.currentLease(l, PublicView)
	}
	return connect.NewResponse(resp), nil
}

func (v *service) List(ctx context.Context, req *connect.Request[fencedv1.ListRequest]) (*connect.Response[fencedv1.ListResponse], error) {
	return read(ctx, v.Deps, req.Msg, false, v.checkList, v.list)
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
	_, err := v.Auth.Authorize(ctx, security.PermRead, req.GetPrefix())
	return apierr.Connect(err)
}

// list answers a checked List from this node's state, whatever its role.
func (v *service) list(req *fencedv1.ListRequest) (*connect.Response[fencedv1.ListResponse], error) {
	prefix, limit := req.GetPrefix(), int(req.GetLimit())
	if limit == 0 || limit > v.ListLimit {
		limit = v.ListLimit
	}
	leases, remaining, applied := v.State.List(prefix, limit)
	resp := &fencedv1.ListResponse{Leases: make([]*fencedv1.Lease, len(leases)), Revision: max(applied, 1)}
	for i, l := range leases {
		resp.Leases[i] = WireLease(l, remaining[i], PublicView)
	}
	return connect.NewResponse(resp), nil
}

func (v *service) Watch(ctx context.Context, req *connect.Request[fencedv1.WatchRequest], stream *connect.ServerStream[fencedv1.WatchResponse]) error {
	if req.Header().Get(rejections.RelayHeader) != "" {
		return v.ServeRelay(ctx, stream) // another node, on the peer port
	}
	prefix := req.Msg.GetPrefix()
	if err := validatePrefix(prefix); err != nil {
		return apierr.Connect(err)
	}
	if _, err := v.Auth.Authorize(ctx, security.PermWatch, prefix); err != nil {
		return apierr.Connect(err)
	}
	release, err := v.Watchers.Acquire(admission.ClientIP(req.Peer().Addr))
	if err != nil {
		return apierr.Connect(err)
	}
	defer release()
	if !v.AwaitCatchUp(ctx) {
		return nil
	}
	// Without after_revision the stream starts at the state this node has
	// applied now: a transition applied before the call but not yet
	// dispatched to the watchers is not sent.
	after := req.Msg.GetAfterRevision()
	if after == 0 {
		after = v.State.Revision()
	}
	sendAll, resync := v.watchSenders(ctx, req, stream, &after)
	// end ends the stream after err; a watcher that has left too much
	// unacknowledged (streamwrite.ErrBehind) is sent RESYNC, last, while
	// there is still room for it.
	end := func(err error) error {
		if !errors.Is(err, streamwrite.ErrBehind) {
			return err
		}
		after = v.State.Revision()
		return resync()
	}
	if req.Msg.GetRejections() {
		defer v.Relay.Join()()
	}
	sub, replay, complete := v.Hub.Subscribe(prefix, after)
	sub.WantRejections(req.Msg.GetRejections())
	defer func() { v.Hub.Unsubscribe(sub) }()
	if !complete {
		after = v.State.Revision()
		if err := resync(); err != nil {
			return err
		}
	}
	if len(replay) > 0 {
		if err := sendAll(nil, replay); err != nil {
			return end(err)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sub.Ready():
			if err := sendAll(sub, nil); err != nil {
				return end(err)
			}
		case <-sub.Lost():
			// Fell behind: deliver what was queued, then say so and start
			// again from now.
			if err := sendAll(sub, nil); err != nil {
				return end(err)
			}
			// The RESYNC's revision is the new start: the transitions
			// up to it that are still undispatched are not sent after it.
			after = v.State.Revision()
			sub, _, _ = v.Hub.Subscribe(prefix, after)
			sub.WantRejections(req.Msg.GetRejections())
			if err := resync(); err != nil {
				return err
			}
		}
	}
}

// watchSenders returns a Watch stream's senders: sendAll sends the events
// queued for sub (taken once a fan-out slot is free), or replay when sub
// is nil, or returns streamwrite.ErrBehind once the watcher has left more
// than its bound unacknowledged; resync sends a RESYNC event.
func (v *service) watchSenders(ctx context.Context, req *connect.Request[fencedv1.WatchRequest], stream *connect.ServerStream[fencedv1.WatchResponse],
	after *uint64,
) (sendAll func(sub *fanout.Subscription, replay []*fanout.Event) error, resync func() error) {
	// Every send must finish within StreamWriteTimeout: a watcher that
	// stops reading is cut off instead of holding its goroutine forever.
	// A batch of queued events is flushed once, after its last event.
	ctl := streamwrite.From(ctx)
	sent := false // connect has sent the headers
	// Events go out within the watcher's bound on unacknowledged bytes
	// (ctl.Send); RESYNC, the last message when it is exceeded, goes
	// out regardless.
	sendAny := func(m *fencedv1.WatchResponse, more bool) error {
		ctl.BeforeSend(v.StreamWriteTimeout, more)
		sent = true
		return stream.Send(m)
	}
	send := func(m *fencedv1.WatchResponse, more bool) error {
		return ctl.Send(func() error { return sendAny(m, more) })
	}
	resync = func() error {
		return sendAny(&fencedv1.WatchResponse{Event: &fencedv1.Event{Type: fencedv1.Event_RESYNC, Revision: *after}}, false)
	}
	// Once connect has sent the headers, a batch of events goes out in
	// few writes below connect, where the stream control allows it.
	var writeFlush func([]byte) error
	if ctl != nil {
		writeFlush = func(b []byte) error {
			return ctl.Send(func() error { return ctl.WriteFlush(v.StreamWriteTimeout, b) })
		}
	}
	batch := fanout.NewBatcher(req.Header().Get("Content-Type"), writeFlush, ctl.MaxWrite())
	// The events are taken once a fan-out slot is ours (internal/sharegate): under
	// overload this watcher falls behind, and is shed with RESYNC past
	// WatchBuffer events, rather than the write path slowing down.
	sendAll = func(sub *fanout.Subscription, replay []*fanout.Event) error {
		release, err := v.Fanout.Acquire(ctx)
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
type adminService struct{ *Deps }

var _ fencedv1connect.AdminServiceHandler = (*adminService)(nil)

func (v *adminService) Revoke(ctx context.Context, req *connect.Request[fencedv1.RevokeRequest]) (*connect.Response[fencedv1.RevokeResponse], error) {
	key := req.Msg.GetKey()
	if err := ValidateKey(key); err != nil {
		return nil, apierr.Connect(err)
	}
	p, err := v.Auth.Authorize(ctx, security.PermAdmin, key)
	if err != nil {
		return nil, apierr.Connect(err)
	}
	l, err := v.Leases.Revoke(ctx, key, p.Name)
	if err != nil {
		return nil, apierr.Connect(err)
	}
	return connect.NewResponse(&fencedv1.RevokeResponse{Lease: WireLease(l, 0, PublicView), RevokedBy: p.Name}), nil
}
