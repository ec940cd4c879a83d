package api

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/server/internal/admission"
	"github.com/fencedio/fenced/server/internal/apierr"
	"github.com/fencedio/fenced/server/internal/streamwrite"
)

// sessionAhead bounds the calls of one Session stream in progress: read
// and not yet answered. Beyond it the stream is not read, and HTTP/2 flow
// control holds the client back.
const sessionAhead = 256

// sessionIdleWorkers bounds the goroutines of one Session stream that wait
// for its next call. A call runs on a worker that served an earlier one
// when one waits: its stack has already grown to what a call takes, where
// a new goroutine's grows, copied at each doubling, on every call (5% of
// the server's CPU at 256 clients).
const sessionIdleWorkers = 4

type sessionStream = connect.BidiStream[fencedv1.SessionRequest, fencedv1.SessionResponse]

// Session serves the Acquire, Renew and Release calls one stream carries,
// each on a goroutine of its own while it runs (a worker of the stream)
// through the same methods as the unary calls (routing to the leader,
// validation, auth, limits and errors included), and answers each once,
// when it ends, in any order. A cancel ends the call it names; a call's
// timeout_ms is its deadline.
//
// The stream ends once the client has closed its side and every call is
// answered, or when a send fails. When its context ends (the server shuts
// down, the client goes away) reading stops at once, the calls in
// progress are cancelled and answered as far as the stream still takes
// answers, and the stream ends: an idle stream does not hold up a
// shutdown.
func (r *routedService) Session(ctx context.Context, stream *sessionStream) error {
	if r.Sessions != nil {
		addr := admission.ClientAddr(ctx)
		if addr == "" {
			addr = admission.ClientIP(stream.Peer().Addr)
		}
		release, err := r.Sessions.Acquire(addr)
		if err != nil {
			return apierr.Connect(err)
		}
		defer release()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := &session{r: r, ctx: ctx, cancel: cancel, ahead: make(chan struct{}, sessionAhead),
		calls: make(map[uint64]context.CancelFunc), wake: make(chan struct{}, 1), work: make(chan sessionCall),
		send: stream.Send, ctl: streamwrite.From(ctx)}
	// net/http forbids reading the body once the handler has returned, and
	// the reader may wait for a request that never comes: when ctx ends,
	// whatever ends it, end the reader's wait at once.
	readsEnded := make(chan struct{})
	stop := context.AfterFunc(ctx, func() { s.ctl.EndReads(); close(readsEnded) })
	defer func() {
		if !stop() {
			<-readsEnded // EndReads must not outlive the handler
		}
	}()
	go s.read(stream.Receive)
	return s.wait()
}

// session is the state of one Session stream: the calls in progress and
// the answers waiting to be sent.
type session struct {
	r      *routedService
	ctx    context.Context // the stream's: its end cancels every call
	cancel context.CancelFunc
	// ahead holds a token for each request read (or being read) and not
	// yet answered: at most sessionAhead.
	ahead chan struct{}

	send func(*fencedv1.SessionResponse) error // the stream's; one sender at a time
	ctl  *streamwrite.Control

	work chan sessionCall // to an idle worker; unbuffered
	idle atomic.Int32     // workers waiting on work, or about to

	mu       sync.Mutex
	calls    map[uint64]context.CancelFunc // the calls running, by id
	running  int                           // calls started and not yet answered (in calls, or answered in queued)
	queued   []*fencedv1.SessionResponse   // answers to send, each holding a token of ahead
	sending  bool                          // a goroutine is sending the queued answers
	sendErr  error                         // the first failed send's error; later answers are dropped
	readDone bool                          // the reader has returned
	readErr  error                         // why it returned; io.EOF when the client closed its side
	wake     chan struct{}                 // signalled when the stream may be done
}

// read reads requests while fewer than sessionAhead calls are in
// progress, and starts each, until the stream or its context ends.
func (s *session) read(receive func() (*fencedv1.SessionRequest, error)) {
	var err error
	for {
		select {
		case s.ahead <- struct{}{}:
		case <-s.ctx.Done():
			s.endReading(s.ctx.Err())
			return
		}
		var req *fencedv1.SessionRequest
		if req, err = receive(); err != nil {
			<-s.ahead
			s.endReading(err)
			return
		}
		s.start(req)
	}
}

func (s *session) endReading(err error) {
	s.mu.Lock()
	s.readDone, s.readErr = true, err
	s.mu.Unlock()
	s.signal()
}

func (s *session) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// start starts the call req, or answers it at once when it is malformed,
// or cancels the call it names.
func (s *session) start(req *fencedv1.SessionRequest) {
	id := req.GetId()
	if _, ok := req.GetCall().(*fencedv1.SessionRequest_Cancel); ok {
		<-s.ahead // a cancel gets no answer
		s.mu.Lock()
		cancel := s.calls[id]
		s.mu.Unlock()
		if cancel != nil {
			cancel()
		}
		return
	}
	var invalid error
	switch {
	case req.GetCall() == nil:
		invalid = apierr.Invalidf("session call %d names no call: set acquire, renew, release or cancel", id)
	case req.GetTimeoutMs() < 0:
		invalid = apierr.Invalidf("session call %d: timeout_ms %d is negative", id, req.GetTimeoutMs())
	}
	s.mu.Lock()
	if _, dup := s.calls[id]; dup && invalid == nil {
		invalid = apierr.Invalidf("session call %d: a call with this id is in progress", id)
	}
	s.running++
	if invalid != nil {
		send := s.queueLocked(&fencedv1.SessionResponse{Id: id, Result: sessionError(apierr.Connect(invalid))})
		s.mu.Unlock()
		if send {
			s.sendQueued()
		}
		return
	}
	ctx, cancel := s.ctx, context.CancelFunc(nil)
	if t := req.GetTimeoutMs(); t > 0 {
		ctx, cancel = context.WithTimeout(ctx, time.Duration(t)*time.Millisecond)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	s.calls[id] = cancel
	s.mu.Unlock()
	c := sessionCall{ctx, cancel, req}
	select {
	case s.work <- c:
	default:
		go s.worker(c)
	}
}

// sessionCall is a call started and not yet run.
type sessionCall struct {
	ctx    context.Context
	cancel context.CancelFunc
	req    *fencedv1.SessionRequest
}

// worker runs c, then the calls it is handed while it waits, until the
// stream ends or sessionIdleWorkers others wait already.
func (s *session) worker(c sessionCall) {
	for {
		s.run(c.ctx, c.cancel, c.req)
		if s.idle.Add(1) > sessionIdleWorkers {
			s.idle.Add(-1)
			return
		}
		select {
		case c = <-s.work:
			s.idle.Add(-1)
		case <-s.ctx.Done():
			s.idle.Add(-1)
			return
		}
	}
}

// queueLocked queues the answer of a call counted in running, and
// reports whether the caller is to send the queue (sendQueued): nobody
// else is sending it. The goroutine whose call ended sends, and goes on
// with the answers queued meanwhile, so that an answer costs no hand-off
// to another goroutine.
func (s *session) queueLocked(resp *fencedv1.SessionResponse) (send bool) {
	s.running--
	s.queued = append(s.queued, resp)
	if s.sending {
		return false
	}
	s.sending = true
	return true
}

// sendQueued sends the queued answers until none is left, holding back
// the flush while more are queued, so that those that ended together leave
// together. After a failed send the calls are cancelled and the answers
// dropped. Only the goroutine that set sending calls it.
func (s *session) sendQueued() {
	s.mu.Lock()
	for len(s.queued) > 0 {
		resp := s.queued[0]
		s.queued[0] = nil
		s.queued = s.queued[1:]
		more := len(s.queued) > 0
		failed := s.sendErr != nil
		s.mu.Unlock()
		if !failed {
			s.ctl.BeforeSend(0, more)
			if err := s.send(resp); err != nil {
				s.mu.Lock()
				s.sendErr = err
				s.mu.Unlock()
				s.cancel() // nobody to answer: stop every call, and the reader
			}
		}
		<-s.ahead
		s.mu.Lock()
	}
	s.sending = false
	done := s.readDone && s.running == 0
	s.mu.Unlock()
	if done {
		s.signal()
	}
}

// run serves one call and queues its answer.
func (s *session) run(ctx context.Context, cancel context.CancelFunc, req *fencedv1.SessionRequest) {
	start := time.Now()
	method, resp := s.serve(ctx, req)
	resp.Id = req.GetId()
	s.r.Counts.ObserveRequest(method, time.Since(start))
	s.mu.Lock()
	delete(s.calls, req.GetId())
	send := s.queueLocked(resp)
	s.mu.Unlock()
	cancel()
	if send {
		s.sendQueued()
	}
}

// serve serves one call, once admitted as a unary call would be, through
// the unary method it wraps; it returns the method's name and the answer.
func (s *session) serve(ctx context.Context, req *fencedv1.SessionRequest) (string, *fencedv1.SessionResponse) {
	method := "Acquire"
	switch req.GetCall().(type) {
	case *fencedv1.SessionRequest_Renew:
		method = "Renew"
	case *fencedv1.SessionRequest_Release:
		method = "Release"
	}
	if s.r.AdmitCall != nil {
		callCtx, leave, err := s.r.AdmitCall(ctx)
		if err != nil {
			return method, &fencedv1.SessionResponse{Result: sessionError(err)}
		}
		defer leave()
		ctx = callCtx
	}
	var err error
	out := &fencedv1.SessionResponse{}
	switch c := req.GetCall().(type) {
	case *fencedv1.SessionRequest_Acquire:
		var resp *connect.Response[fencedv1.AcquireResponse]
		if resp, err = s.r.Acquire(ctx, connect.NewRequest(c.Acquire)); err == nil {
			out.Result = &fencedv1.SessionResponse_Acquire{Acquire: resp.Msg}
		}
	case *fencedv1.SessionRequest_Renew:
		var resp *connect.Response[fencedv1.RenewResponse]
		if resp, err = s.r.Renew(ctx, connect.NewRequest(c.Renew)); err == nil {
			out.Result = &fencedv1.SessionResponse_Renew{Renew: resp.Msg}
		}
	case *fencedv1.SessionRequest_Release:
		var resp *connect.Response[fencedv1.ReleaseResponse]
		if resp, err = s.r.Release(ctx, connect.NewRequest(c.Release)); err == nil {
			out.Result = &fencedv1.SessionResponse_Release{Release: resp.Msg}
		}
	}
	if err != nil {
		out.Result = sessionError(err)
	}
	return method, out
}

// sessionError is the answer to a call that failed with err: the error
// its unary call would have answered.
func sessionError(err error) *fencedv1.SessionResponse_Error {
	var ce *connect.Error
	if !errors.As(err, &ce) && !errors.As(apierr.Connect(err), &ce) {
		ce = connect.NewError(connect.CodeUnavailable, err)
	}
	out := &fencedv1.SessionError{Code: ce.Code().String(), Message: ce.Message()}
	for _, d := range ce.Details() {
		if m, derr := d.Value(); derr == nil {
			if held, ok := m.(*fencedv1.LeaseHeld); ok {
				out.Held = held
			}
		}
	}
	return &fencedv1.SessionResponse_Error{Error: out}
}

// wait returns once the reader has returned and every call is answered:
// nil when the client closed its side, the reading's error otherwise, or
// the first failed send's error.
func (s *session) wait() error {
	for {
		s.mu.Lock()
		if s.readDone && s.running == 0 && !s.sending {
			sendErr, readErr := s.sendErr, s.readErr
			s.mu.Unlock()
			return s.end(sendErr, readErr)
		}
		s.mu.Unlock()
		<-s.wake
	}
}

// end is the stream's end, once every call is answered.
func (s *session) end(sendErr, readErr error) error {
	switch {
	case sendErr != nil:
		return sendErr
	case errors.Is(readErr, io.EOF):
		return nil
	case s.ctx.Err() != nil:
		// The server shuts down (unavailable), or the client went away.
		return apierr.Connect(context.Cause(s.ctx))
	}
	return readErr
}
