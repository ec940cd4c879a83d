package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
)

// Renewals over one stream
//
// A client's leases renew over one shared KeepAlive stream, opened when the
// first lease needs a renewal and closed when the client holds no lease.
// Renewals from any number of leases are pipelined on it: each is sent when
// due, and the server answers them in order. That costs the server one
// stream instead of one HTTP request per renewal.
//
// The stream changes how a renewal travels, never what it means: the
// deadline still counts from before the renewal was sent, and a refusal
// still loses the lease. Whenever the stream cannot give an answer (it
// does not open because the server or the HTTP client does not speak
// HTTP/2, it breaks, the node answers unavailable, or no answer comes
// within half the renewal's timeout or half the time left before the
// lease's local deadline) the renewal is sent again at once as a
// unary Renew, which fails over between endpoints as every call does, and
// the next stream is opened at the next endpoint after a pause that grows
// from one second to a minute while streams keep failing (a stream that
// served longer than that starts the pauses over).

// Pauses before a stream is opened again after one failed.
const (
	minStreamPause = time.Second
	maxStreamPause = time.Minute
)

// renewals is a client's shared renewal stream.
type renewals struct {
	c *Client

	mu      sync.Mutex
	leases  int           // leases that may renew: the stream lives while > 0
	cur     *renewStream  // nil until needed, and after a failure
	retryAt time.Time     // no new stream before this
	pause   time.Duration // the next pause after a failure
}

// hold and drop count the leases that may renew; the stream closes when
// none is left.
func (r *renewals) hold() {
	r.mu.Lock()
	r.leases++
	r.mu.Unlock()
}

func (r *renewals) drop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.leases--
	if r.leases == 0 && r.cur != nil {
		r.cur.fail(errStreamClosed)
		r.cur = nil
	}
}

var (
	errStreamClosed = errors.New("renewal stream closed: no lease left")
	errStreamMoved  = errors.New("renewal stream closed: the client moved to another endpoint")
)

// stream returns the open stream, opening one if none is open and no pause
// is under way; nil means renew over unary calls. The stream follows the
// endpoint in use: when the client has moved on (to the leader, see
// leader.go) a new stream opens there and the old one closes.
func (r *renewals) stream() *renewStream {
	r.mu.Lock()
	defer r.mu.Unlock()
	i, ep := r.c.eps.pick()
	if r.cur != nil && r.cur.ep != i {
		r.cur.fail(errStreamMoved)
		r.cur = nil
	}
	if r.cur != nil || r.leases == 0 || time.Now().Before(r.retryAt) {
		return r.cur
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &renewStream{ep: i, opened: time.Now(), stream: ep.streams.KeepAlive(ctx), cancel: cancel}
	r.c.bg.goFn(s.receive)
	r.cur = s
	return s
}

// failed ends s after err and moves on to the next endpoint; the next
// stream opens after a pause.
func (r *renewals) failed(s *renewStream, err error) {
	s.fail(err)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur != s {
		return // already replaced
	}
	r.cur = nil
	r.c.eps.failedOver(s.ep)
	if time.Since(s.opened) > maxStreamPause {
		r.pause = 0 // it served for a while: start over
	}
	r.pause = min(max(2*r.pause, minStreamPause), maxStreamPause)
	r.retryAt = time.Now().Add(r.pause)
}

// renew renews lease id of key over the stream when one is usable, else,
// or when the stream gives no answer, with the unary Renew. The stream gets
// half of what is left of ctx's time and, when by is set (the lease's local
// deadline), half of what is left before by, so that a stream that stopped
// answering leaves the unary call time to get through before the lease is
// lost.
func (c *Client) renew(ctx context.Context, by time.Time, key, id string) (Info, error) {
	limit, bounded := time.Duration(-1), false // none
	if d, ok := ctx.Deadline(); ok {
		limit, bounded = time.Until(d)/2, true
	}
	if !by.IsZero() && (!bounded || time.Until(by)/2 < limit) {
		limit, bounded = time.Until(by)/2, true
	}
	if s := c.renewals.stream(); s != nil && (!bounded || limit > 0) {
		info, err := s.renew(ctx, limit, key, id)
		if err == nil || !errors.Is(err, errNoAnswer) {
			return info, err
		}
		c.renewals.failed(s, err)
		if ctx.Err() != nil {
			return Info{}, fmt.Errorf("renew %q: %w", key, err)
		}
	}
	// Unary: the Session stream shares the KeepAlive stream's HTTP/2
	// connection, which may be what failed.
	return c.renewBy(ctx, key, id, false)
}

// errNoAnswer marks stream errors that say nothing about the lease.
var errNoAnswer = errors.New("no answer on the renewal stream")

var errAnswerLate = errors.New("no answer within half the renewal's timeout")

// renewStream is one KeepAlive stream and the renewals waiting for their
// answers, in the order they were sent.
type renewStream struct {
	ep     int // index of its endpoint
	opened time.Time
	stream *connect.BidiStreamForClient[fencedv1.KeepAliveRequest, fencedv1.KeepAliveResponse]
	cancel context.CancelFunc

	sendMu sync.Mutex // keeps the queue in the order of the sends

	mu      sync.Mutex
	waiting []chan answer // nil once failed
	err     error         // why it failed
}

type answer struct {
	resp *fencedv1.KeepAliveResponse
	err  error
}

// renew sends one renewal and waits for its answer until ctx ends or, when
// limit is not negative, limit passes. An error matching errNoAnswer says
// the stream gave no answer; any other is the server's answer about the
// lease.
func (s *renewStream) renew(ctx context.Context, limit time.Duration, key, id string) (Info, error) {
	if limit >= 0 {
		// Answers come in order: a late one holds up every other, so the
		// stream fails, which also ends a Send blocked by a node that
		// stopped reading.
		t := time.AfterFunc(limit, func() { s.fail(errAnswerLate) })
		defer t.Stop()
	}
	ch := make(chan answer, 1)
	s.sendMu.Lock()
	s.mu.Lock()
	err := s.err
	if err == nil {
		s.waiting = append(s.waiting, ch)
	}
	s.mu.Unlock()
	if err == nil {
		err = s.stream.Send(&fencedv1.KeepAliveRequest{Key: key, LeaseId: id})
	}
	s.sendMu.Unlock()
	if err != nil {
		s.fail(err)
		return Info{}, fmt.Errorf("keepalive %q: %w: %w", key, errNoAnswer, err)
	}
	var a answer
	select {
	case a = <-ch:
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			s.fail(errAnswerLate)
		}
		return Info{}, fmt.Errorf("keepalive %q: %w: %w", key, errNoAnswer, ctx.Err())
	}
	if a.err != nil {
		return Info{}, fmt.Errorf("keepalive %q: %w: %w", key, errNoAnswer, a.err)
	}
	if code := a.resp.GetErrorCode(); code != "" {
		var c connect.Code
		if err := c.UnmarshalText([]byte(code)); err != nil {
			c = connect.CodeUnknown
		}
		err := fromRPC(connect.NewError(c, errors.New(a.resp.GetErrorMessage())))
		if c == connect.CodeUnavailable {
			// This node cannot renew now: try the next one.
			err = fmt.Errorf("%w: %w", errNoAnswer, err)
		}
		return Info{}, fmt.Errorf("keepalive %q: %w", key, err)
	}
	info := infoFromProto(a.resp.GetLease())
	info.Signature = a.resp.GetTokenSignature()
	return info, nil
}

// receive hands each answer to the renewal waiting longest, until the
// stream fails.
func (s *renewStream) receive() {
	for {
		resp, err := s.stream.Receive()
		if err != nil {
			s.fail(err)
			return
		}
		s.mu.Lock()
		if len(s.waiting) == 0 {
			s.mu.Unlock()
			s.fail(errors.New("an answer to no renewal"))
			return
		}
		ch := s.waiting[0]
		s.waiting[0] = nil
		s.waiting = s.waiting[1:]
		s.mu.Unlock()
		ch <- answer{resp: resp}
	}
}

// fail ends the stream once, giving err to every renewal still waiting.
func (s *renewStream) fail(err error) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = err
	waiting := s.waiting
	s.waiting = nil
	s.mu.Unlock()
	// Cancelling alone does not end a request body the HTTP/2 transport is
	// reading from; closing it does.
	s.cancel()
	s.stream.CloseRequest()
	s.stream.CloseResponse()
	for _, ch := range waiting {
		ch <- answer{err: err}
	}
}
