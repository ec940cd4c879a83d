package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
)

// Calls over one stream
//
// Acquire, Renew and Release travel over one Session stream per endpoint
// (HTTP/2), opened by the first call to that endpoint and shared by every
// call after it: a call is one message carrying an id of its own, and its
// answer one message with the same id, in any order. That costs client and
// server a message on an open stream instead of an HTTP request. Sends are
// serialized; one goroutine per stream reads the answers and hands each to
// the call waiting for it.
//
// The stream changes how a call travels, never what it means:
//   - A new stream carries no call until it has answered a probe (a Renew of
//     the empty key, which can only be refused), which proves that the
//     server serves Session. The first call to an endpoint opens the stream
//     and goes unary, as do the calls after it until the probe is
//     answered: no call waits for a probe. If the probe fails (the server
//     answers unimplemented, the HTTP client or a proxy speaks only
//     HTTP/1.1, the node is down, or no answer comes within
//     Config.RequestTimeout), the endpoint's calls go unary and a new
//     stream is tried after a pause of one second, doubling up to a minute
//     while probes keep failing.
//   - A call that the stream did not send (it broke first) goes as the
//     unary call: nothing of it reached the server.
//   - A call sent on a stream that ends before its answer has an unknown
//     outcome, exactly as a unary call cut after it was sent: it fails as
//     unavailable, which fails over between endpoints, and an Acquire or a
//     Release counts as possibly applied (see endpoints.go and uncertain.go).
//     The endpoint's next call opens a new stream.
//   - The call's deadline goes with it (timeout_ms). A call whose context
//     ends sends a cancel for its id and returns the context's error, as a
//     unary call does. An Acquire whose grant comes all the same (it raced
//     the cancel) is released in the background when that answer arrives:
//     the caller never saw it, and the key is free a TTL sooner.
//   - An answer's error is the unary call's: its code, message and LeaseHeld
//     detail make the same *connect.Error, mapped by fromRPC.
//
// A stream ends when its endpoint is no longer the one in use (the client
// moved to the leader, failed over, or synced the endpoint away), once its
// calls are answered. Config.DisableSession sends every call unary. Close
// ends the streams; CloseIdleConnections ends those that carry no call.

// Pauses before an endpoint whose probe failed is probed again.
const (
	minSessionPause = time.Second
	maxSessionPause = time.Minute
)

var (
	errSessionClosed = errors.New("session stream closed")
	errProbeTimeout  = errors.New("session stream: no answer to the probe in time")
)

// sessions is every endpoint's session and every open stream, so that
// Close can end them.
type sessions struct {
	mu     sync.Mutex
	all    map[*session]struct{}
	closed bool

	// streams are the open streams, those that left their session while
	// calls still wait on them included, until their readers return.
	streamsMu sync.Mutex // taken with no other lock held after it
	streams   map[*sessionStream]struct{}
	readers   sync.WaitGroup
}

func (r *sessions) opened(st *sessionStream) {
	r.streamsMu.Lock()
	defer r.streamsMu.Unlock()
	if r.streams == nil {
		r.streams = make(map[*sessionStream]struct{})
	}
	r.streams[st] = struct{}{}
	r.readers.Add(1)
}

func (r *sessions) gone(st *sessionStream) {
	r.streamsMu.Lock()
	delete(r.streams, st)
	r.streamsMu.Unlock()
	r.readers.Done()
}

// add records s; after Close, s opens no stream.
func (r *sessions) add(s *session) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		s.retired = true
		return
	}
	if r.all == nil {
		r.all = make(map[*session]struct{})
	}
	r.all[s] = struct{}{}
}

// retire ends s, whose endpoint left the list, once its calls are answered.
func (r *sessions) retire(s *session) {
	if s == nil {
		return
	}
	r.mu.Lock()
	delete(r.all, s)
	r.mu.Unlock()
	if st := s.retire(); st != nil {
		st.retire()
	}
}

// closeIdle ends the streams that carry no call.
func (r *sessions) closeIdle() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for s := range r.all {
		s.closeIdle()
	}
}

// close ends every stream, cutting the calls in flight, and waits for
// their readers to return. Calls after it go unary.
func (r *sessions) close() {
	r.mu.Lock()
	r.closed = true
	all := r.all
	r.all = nil
	r.mu.Unlock()
	for s := range all {
		s.retire() // no session opens a stream from now on
	}
	r.streamsMu.Lock()
	streams := make([]*sessionStream, 0, len(r.streams))
	for st := range r.streams {
		streams = append(streams, st)
	}
	r.streamsMu.Unlock()
	for _, st := range streams {
		st.fail(errSessionClosed)
	}
	r.readers.Wait()
}

// leaveSessions ends the Session streams of the endpoints not in use once
// their calls are answered (the client moved to the leader, or failed over),
// so that a client keeps open only the stream it uses. A call that goes
// there later opens a new one.
func (c *Client) leaveSessions() {
	_, cur := c.eps.pick()
	for _, ep := range c.eps.list() {
		if ep.url != cur.url && ep.session != nil {
			ep.session.leave()
		}
	}
}

// session is one endpoint's Session stream, opened when a call needs it.
type session struct {
	c   *Client
	rpc fencedv1connect.LeaseServiceClient // the endpoint's streaming client

	mu      sync.Mutex
	cur     *sessionStream // nil until needed, after a failure and once retired
	retryAt time.Time      // no probe before this
	pause   time.Duration  // the next pause after a failed probe
	retired bool           // no new stream: closed, or the endpoint left the list
}

// stream returns the endpoint's stream if it is proven to serve Session;
// nil means: send the call unary. Without a stream, and with no pause
// under way, it opens one and probes it in the background, so that no call
// waits for a probe (which a server without Session may leave unanswered
// until it times out).
func (s *session) stream() *sessionStream {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.cur
	if st == nil {
		if !s.retired && !time.Now().Before(s.retryAt) {
			s.cur = s.open()
		}
		return nil
	}
	select {
	case <-st.probed:
		if st.probeErr == nil {
			return st
		}
	default:
	}
	return nil
}

// open starts a stream and its probe; s.mu is held.
func (s *session) open() *sessionStream {
	ctx, cancel := context.WithCancel(context.Background())
	st := &sessionStream{s: s, stream: s.rpc.Session(ctx), cancel: cancel,
		probed: make(chan struct{}), sendSem: make(chan struct{}, 1), calls: map[uint64]*sessionCall{}}
	s.c.sessions.opened(st)
	go st.run()
	return st
}

// probeDone records the outcome of st's probe.
func (s *session) probeDone(st *sessionStream, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		s.pause = 0
		return
	}
	if s.cur == st {
		s.cur = nil
	}
	s.pause = min(max(2*s.pause, minSessionPause), maxSessionPause)
	s.retryAt = time.Now().Add(s.pause)
}

// ended forgets st, which failed: the next call opens a new stream.
func (s *session) ended(st *sessionStream) {
	s.mu.Lock()
	if s.cur == st {
		s.cur = nil
	}
	s.mu.Unlock()
}

// retire stops s from opening streams and returns its stream, if any.
func (s *session) retire() *sessionStream {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.retired = true
	st := s.cur
	s.cur = nil
	return st
}

// leave ends s's stream once no call waits on it; a later call opens a
// new one.
func (s *session) leave() {
	s.mu.Lock()
	st := s.cur
	s.cur = nil
	s.mu.Unlock()
	if st != nil {
		st.retire()
	}
}

func (s *session) closeIdle() {
	s.mu.Lock()
	st := s.cur
	s.mu.Unlock()
	if st != nil && st.end(errSessionClosed, true) {
		s.ended(st)
	}
}

// sessionStream is one Session stream and the calls waiting for answers.
type sessionStream struct {
	s      *session
	stream *connect.BidiStreamForClient[fencedv1.SessionRequest, fencedv1.SessionResponse]
	cancel context.CancelFunc

	probed   chan struct{} // closed when the probe is answered or failed
	probeErr error         // set before probed is closed; nil: Session is served

	sendSem chan struct{} // held while sending, so that a waiting sender can give up

	mu       sync.Mutex
	lastID   uint64
	calls    map[uint64]*sessionCall // nil once failed
	err      error                   // why it failed
	retiring bool                    // end once no call waits
}

// sessionCall is a call waiting for its answer.
type sessionCall struct {
	ch chan sessionAnswer // gets the answer, or the stream's failure; buffered
	// late, once the caller gave up, takes the answer instead; nil ignores it.
	late      func(*fencedv1.SessionResponse)
	abandoned bool
}

type sessionAnswer struct {
	resp *fencedv1.SessionResponse
	err  error
}

// run probes the stream, then hands each answer to its call until the
// stream fails.
func (st *sessionStream) run() {
	defer st.s.c.sessions.gone(st)
	err := st.probe()
	st.probeErr = err
	close(st.probed)
	st.s.probeDone(st, err)
	if err != nil {
		st.fail(err)
		return
	}
	for {
		resp, err := st.stream.Receive()
		if err != nil {
			st.fail(err)
			break
		}
		st.dispatch(resp)
	}
	st.s.ended(st)
}

// probe sends a Renew of the empty key, which a server that serves Session
// refuses (invalid_argument, or an auth error), and waits for that answer.
func (st *sessionStream) probe() error {
	t := time.AfterFunc(st.s.c.cfg.RequestTimeout, func() { st.fail(errProbeTimeout) })
	defer t.Stop()
	err := st.stream.Send(&fencedv1.SessionRequest{Call: &fencedv1.SessionRequest_Renew{Renew: &fencedv1.RenewRequest{}}})
	var resp *fencedv1.SessionResponse
	if err == nil || errors.Is(err, io.EOF) {
		// After a failed Send, Receive has the server's error.
		resp, err = st.stream.Receive()
	}
	st.mu.Lock()
	if st.err != nil {
		err = st.err
	}
	st.mu.Unlock()
	switch {
	case err != nil:
		return fmt.Errorf("session probe: %w", err)
	case resp.GetId() != 0 || resp.GetError() == nil:
		return fmt.Errorf("session probe: unexpected answer %v", resp)
	}
	return nil
}

// dispatch hands resp to the call with its id.
func (st *sessionStream) dispatch(resp *fencedv1.SessionResponse) {
	st.mu.Lock()
	c := st.calls[resp.GetId()]
	delete(st.calls, resp.GetId())
	idle := st.retiring && len(st.calls) == 0
	st.mu.Unlock()
	switch {
	case c == nil: // no call waits for it: nothing to do
	case c.abandoned:
		if c.late != nil {
			c.late(resp)
		}
	default:
		c.ch <- sessionAnswer{resp: resp}
	}
	if idle {
		st.fail(errSessionClosed)
	}
}

// call sends req and waits for its answer, until ctx ends. sent reports
// whether req may have reached the server; when the stream failed before
// it was sent, nothing of it did. late, if not nil, gets the answer of a
// call whose context ended first.
func (st *sessionStream) call(ctx context.Context, req *fencedv1.SessionRequest, late func(*fencedv1.SessionResponse)) (resp *fencedv1.SessionResponse, sent bool, err error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	c := &sessionCall{ch: make(chan sessionAnswer, 1), late: late}
	select {
	case st.sendSem <- struct{}{}:
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
	st.mu.Lock()
	err = st.err
	if err == nil {
		st.lastID++
		req.Id = st.lastID
		st.calls[req.Id] = c
	}
	st.mu.Unlock()
	if err == nil {
		// A Send that fails did not hand the whole message to the transport.
		err = st.stream.Send(req)
	}
	<-st.sendSem
	if err != nil {
		st.fail(err)
		return nil, false, err
	}
	select {
	case a := <-c.ch:
		return a.resp, true, a.err
	case <-ctx.Done():
	}
	st.mu.Lock()
	_, waiting := st.calls[req.Id]
	if waiting {
		c.abandoned = true
	}
	st.mu.Unlock()
	if !waiting { // answered, or the stream failed, meanwhile
		a := <-c.ch
		return a.resp, true, a.err
	}
	st.s.c.bg.goFn(func() {
		st.send(&fencedv1.SessionRequest{Id: req.Id, Call: &fencedv1.SessionRequest_Cancel{Cancel: &fencedv1.SessionCancel{}}})
	})
	return nil, true, ctx.Err()
}

// send sends req, best effort.
func (st *sessionStream) send(req *fencedv1.SessionRequest) {
	st.sendSem <- struct{}{}
	defer func() { <-st.sendSem }()
	st.mu.Lock()
	failed := st.err != nil
	st.mu.Unlock()
	if !failed {
		if err := st.stream.Send(req); err != nil {
			st.fail(err)
		}
	}
}

// retire ends the stream once no call waits on it.
func (st *sessionStream) retire() {
	st.mu.Lock()
	st.retiring = true
	st.mu.Unlock()
	st.end(errSessionClosed, true)
}

func (st *sessionStream) fail(err error) { st.end(err, false) }

// end fails the stream once with err, unless onlyIdle and a call waits,
// and reports whether it did. Every call still waiting gets err.
func (st *sessionStream) end(err error, onlyIdle bool) bool {
	st.mu.Lock()
	if st.err != nil || (onlyIdle && len(st.calls) > 0) {
		st.mu.Unlock()
		return false
	}
	st.err = err
	calls := st.calls
	st.calls = nil
	st.mu.Unlock()
	// Cancelling alone does not end a request body the HTTP/2 transport is
	// reading from; closing it does.
	st.cancel()
	st.stream.CloseRequest()
	st.stream.CloseResponse()
	for _, c := range calls {
		if !c.abandoned {
			c.ch <- sessionAnswer{err: err}
		}
	}
	return true
}

// overSession sends req to ep over its session stream, if it has one that
// serves Session. ok false means: send the call unary instead (no stream,
// or it broke before sending). Otherwise err is what the unary call would
// have returned: the answer's error, ctx's, or unavailable for a stream
// that ended after the call was sent.
func (c *Client) overSession(ctx context.Context, ep endpoint, req *fencedv1.SessionRequest, late func(*fencedv1.SessionResponse)) (resp *fencedv1.SessionResponse, ok bool, err error) {
	if ep.session == nil {
		return nil, false, nil
	}
	st := ep.session.stream()
	if st == nil {
		return nil, false, nil
	}
	if d, ok := ctx.Deadline(); ok {
		req.TimeoutMs = max(int64((time.Until(d)+time.Millisecond-1)/time.Millisecond), 1)
	}
	resp, sent, err := st.call(ctx, req, late)
	switch {
	case err == nil && resp.GetError() != nil:
		return nil, true, answerError(ctx, resp.GetError())
	case err == nil:
		return resp, true, nil
	case ctx.Err() != nil:
		return nil, true, contextError(ctx.Err())
	case !sent:
		return nil, false, nil
	}
	return nil, true, connect.NewError(connect.CodeUnavailable,
		fmt.Errorf("session stream to %s ended before the answer: %w", ep.url, err))
}

// contextError is a call's error when its context ended, as connect gives it.
func contextError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	return connect.NewError(connect.CodeCanceled, err)
}

// answerError is the *connect.Error of a Session answer's error, as the
// unary call would have failed.
func answerError(ctx context.Context, e *fencedv1.SessionError) error {
	var code connect.Code
	if err := code.UnmarshalText([]byte(e.GetCode())); err != nil {
		code = connect.CodeUnknown
	}
	if code == connect.CodeCanceled || code == connect.CodeDeadlineExceeded {
		if err := ctx.Err(); err != nil {
			// The answer to the caller's own cancel or deadline.
			return contextError(err)
		}
		if dl, ok := ctx.Deadline(); ok && code == connect.CodeDeadlineExceeded && !time.Now().Before(dl) {
			// The call's deadline on the server is the caller's: its
			// answer may come before the caller's own timer fires.
			return contextError(context.DeadlineExceeded)
		}
	}
	if code == connect.CodeCanceled {
		// The server cancelled the call, not the caller (it is shutting
		// down): as cutIsUnavailable does for a unary call.
		code = connect.CodeUnavailable
	}
	ce := connect.NewError(code, errors.New(e.GetMessage()))
	if h := e.GetHeld(); h != nil {
		if d, err := connect.NewErrorDetail(h); err == nil {
			ce.AddDetail(d)
		}
	}
	return ce
}

// wrongAnswer is the error of an answer of another kind than the call.
func wrongAnswer(call string, resp *fencedv1.SessionResponse) error {
	return connect.NewError(connect.CodeInternal, fmt.Errorf("session: %s answered with %T", call, resp.GetResult()))
}

// acquireAt, renewAt and releaseAt send one call to ep: over its session
// stream when it has one, else unary.
func (c *Client) acquireAt(ctx context.Context, ep endpoint, req *fencedv1.AcquireRequest) (*fencedv1.AcquireResponse, error) {
	resp, ok, err := c.overSession(ctx, ep, &fencedv1.SessionRequest{Call: &fencedv1.SessionRequest_Acquire{Acquire: req}}, c.releaseUnseen)
	switch {
	case !ok:
		r, err := ep.rpc.Acquire(ctx, connect.NewRequest(req))
		if err != nil {
			return nil, err
		}
		return r.Msg, nil
	case err != nil:
		return nil, err
	case resp.GetAcquire() == nil:
		return nil, wrongAnswer("acquire", resp)
	}
	return resp.GetAcquire(), nil
}

func (c *Client) renewAt(ctx context.Context, ep endpoint, req *fencedv1.RenewRequest) (*fencedv1.RenewResponse, error) {
	resp, ok, err := c.overSession(ctx, ep, &fencedv1.SessionRequest{Call: &fencedv1.SessionRequest_Renew{Renew: req}}, nil)
	switch {
	case !ok:
		r, err := ep.rpc.Renew(ctx, connect.NewRequest(req))
		if err != nil {
			return nil, err
		}
		return r.Msg, nil
	case err != nil:
		return nil, err
	case resp.GetRenew() == nil:
		return nil, wrongAnswer("renew", resp)
	}
	return resp.GetRenew(), nil
}

func (c *Client) releaseAt(ctx context.Context, ep endpoint, req *fencedv1.ReleaseRequest) error {
	resp, ok, err := c.overSession(ctx, ep, &fencedv1.SessionRequest{Call: &fencedv1.SessionRequest_Release{Release: req}}, nil)
	switch {
	case !ok:
		_, err := ep.rpc.Release(ctx, connect.NewRequest(req))
		return err
	case err != nil:
		return err
	case resp.GetRelease() == nil:
		return wrongAnswer("release", resp)
	}
	return nil
}

// releaseUnseen releases, in the background, a grant that came after its
// Acquire's caller gave up: nobody holds it, and released the key is free a
// TTL sooner than by expiry.
func (c *Client) releaseUnseen(resp *fencedv1.SessionResponse) {
	l := resp.GetAcquire().GetLease()
	if l == nil {
		return
	}
	c.bg.goFn(func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.RequestTimeout)
		defer cancel()
		_ = c.Release(ctx, l.GetKey(), l.GetLeaseId())
	})
}
