package server

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
)

// h2cFrom is a lease API client over HTTP/2 without TLS whose connections
// come from the loopback address ip, with token as its bearer token if
// set.
func h2cFrom(t testing.TB, base, ip, token string) fencedv1connect.LeaseServiceClient {
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: protocols, DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	var rt http.RoundTripper = tr
	if token != "" {
		rt = bearer{token, tr}
	}
	return fencedv1connect.NewLeaseServiceClient(&http.Client{Transport: rt}, base)
}

// testSession is an open Session stream; answers that arrive before they
// are asked for are kept by id.
type testSession struct {
	t       testing.TB
	stream  *connect.BidiStreamForClient[fencedv1.SessionRequest, fencedv1.SessionResponse]
	arrived map[uint64]*fencedv1.SessionResponse
}

func openSession(t testing.TB, c fencedv1connect.LeaseServiceClient) *testSession {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	st := c.Session(ctx)
	t.Cleanup(func() { st.CloseRequest(); st.CloseResponse() })
	return &testSession{t: t, stream: st, arrived: map[uint64]*fencedv1.SessionResponse{}}
}

// send sends req. A stream the server has ended (a refusal before the
// first call, say) fails Send with io.EOF, and connect-go gives the
// server's error to Receive: next reports it.
func (s *testSession) send(req *fencedv1.SessionRequest) {
	s.t.Helper()
	if err := s.stream.Send(req); err != nil && !errors.Is(err, io.EOF) {
		s.t.Fatalf("send call %d: %v", req.GetId(), err)
	}
}

// next is the next answer to arrive, or the error that ended the stream.
func (s *testSession) next() (*fencedv1.SessionResponse, error) { return s.stream.Receive() }

// answer is the answer to call id, reading on until it arrives.
func (s *testSession) answer(id uint64) *fencedv1.SessionResponse {
	s.t.Helper()
	for {
		if resp, ok := s.arrived[id]; ok {
			delete(s.arrived, id)
			return resp
		}
		resp, err := s.next()
		if err != nil {
			s.t.Fatalf("waiting for the answer to call %d: %v", id, err)
		}
		if _, dup := s.arrived[resp.GetId()]; dup {
			s.t.Fatalf("two answers to call %d", resp.GetId())
		}
		s.arrived[resp.GetId()] = resp
	}
}

// call sends req and returns its answer.
func (s *testSession) call(req *fencedv1.SessionRequest) *fencedv1.SessionResponse {
	s.t.Helper()
	s.send(req)
	return s.answer(req.GetId())
}

func sessionAcquire(id uint64, key string, waitMs, timeoutMs int64) *fencedv1.SessionRequest {
	return &fencedv1.SessionRequest{Id: id, TimeoutMs: timeoutMs, Call: &fencedv1.SessionRequest_Acquire{
		Acquire: &fencedv1.AcquireRequest{Key: key, Owner: "S", TtlMs: 60_000, WaitMs: waitMs}}}
}

func sessionRenew(id uint64, key, leaseID string) *fencedv1.SessionRequest {
	return &fencedv1.SessionRequest{Id: id, Call: &fencedv1.SessionRequest_Renew{
		Renew: &fencedv1.RenewRequest{Key: key, LeaseId: leaseID}}}
}

func sessionRelease(id uint64, key, leaseID string) *fencedv1.SessionRequest {
	return &fencedv1.SessionRequest{Id: id, Call: &fencedv1.SessionRequest_Release{
		Release: &fencedv1.ReleaseRequest{Key: key, LeaseId: leaseID}}}
}

// errorCode fails t unless resp is an error answer with code, and returns
// the error.
func errorCode(t testing.TB, what string, resp *fencedv1.SessionResponse, code connect.Code) *fencedv1.SessionError {
	t.Helper()
	if resp.GetError().GetCode() != code.String() {
		t.Fatalf("%s: %v, want %s", what, resp, code)
	}
	return resp.GetError()
}

// awaitWaiters waits until n acquisitions wait in line on s.
func awaitWaiters(t *testing.T, s *Server, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); s.waiters.Len() != n; time.Sleep(time.Millisecond) { // the queue has no signal
		if time.Now().After(deadline) {
			t.Fatalf("%d acquisitions wait, want %d", s.waiters.Len(), n)
		}
	}
}

// Each call on a Session stream is answered as its unary call would be,
// once, in the order the calls end: a waiting Acquire does not hold up a
// later Release; a held key, a stale lease, a deadline and bad input get
// the unary call's errors, and the stream goes on; a cancelled wait
// answers "canceled" and leaves the key to its holder. Every call counts
// in the request metrics as the method it wraps.
func TestSessionCalls(t *testing.T) {
	s, base := serveAPI(t, Config{})
	unary := newH2CCaller(base, "")
	ctx := context.Background()
	held, err := unary.lease.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "s/held", Owner: "A", TtlMs: 60_000}))
	if err != nil {
		t.Fatal(err)
	}
	ss := openSession(t, h2cFrom(t, base, "127.0.0.1", ""))

	l := ss.call(sessionAcquire(1, "s/1", 0, 0)).GetAcquire().GetLease()
	if l.GetKey() != "s/1" || l.GetOwner() != "S" || l.GetLeaseId() == "" || l.GetToken() == 0 {
		t.Fatalf("acquisition: %v", l)
	}
	if r := ss.call(sessionRenew(2, "s/1", l.GetLeaseId())).GetRenew().GetLease(); r.GetToken() != l.GetToken() || r.GetLeaseId() != l.GetLeaseId() {
		t.Fatalf("renewal: %v, want the same lease and token", r)
	}

	// A wait for the held key, then a release: the release is answered
	// first.
	ss.send(sessionAcquire(10, "s/held", 30_000, 0))
	awaitWaiters(t, s, 1)
	ss.send(sessionRelease(11, "s/1", l.GetLeaseId()))
	if resp, err := ss.next(); err != nil || resp.GetId() != 11 || resp.GetRelease() == nil {
		t.Fatalf("first answer while call 10 waits: %v %v, want the release (11)", resp, err)
	}
	if _, ok := s.currentOf("s/1"); ok {
		t.Fatal("s/1 still held after its release was answered")
	}

	e := errorCode(t, "acquisition of a held key", ss.call(sessionAcquire(12, "s/held", 0, 0)), connect.CodeFailedPrecondition)
	if e.GetHeld().GetOwner() != "A" || e.GetHeld().GetToken() != held.Msg.GetLease().GetToken() || e.GetHeld().GetRemainingMs() <= 0 {
		t.Fatalf("held detail %v, want A's lease", e.GetHeld())
	}
	errorCode(t, "renewal of a released lease", ss.call(sessionRenew(13, "s/1", l.GetLeaseId())), connect.CodeNotFound)
	errorCode(t, "wait beyond timeout_ms", ss.call(sessionAcquire(14, "s/held", 30_000, 50)), connect.CodeDeadlineExceeded)

	// Bad input: answered invalid_argument, the stream goes on.
	errorCode(t, "no call", ss.call(&fencedv1.SessionRequest{Id: 15}), connect.CodeInvalidArgument)
	errorCode(t, "bad key", ss.call(sessionAcquire(16, "", 0, 0)), connect.CodeInvalidArgument)
	errorCode(t, "negative timeout", ss.call(sessionAcquire(17, "s/2", 0, -1)), connect.CodeInvalidArgument)
	ss.send(sessionAcquire(10, "s/2", 0, 0)) // call 10 still waits
	if resp, err := ss.next(); err != nil || resp.GetId() != 10 || resp.GetError().GetCode() != "invalid_argument" {
		t.Fatalf("a second call 10 while the first waits: %v %v, want invalid_argument", resp, err)
	}
	if _, ok := s.currentOf("s/2"); ok {
		t.Fatal("a refused call acquired its key")
	}

	// Cancel the wait: "canceled", and the key is not handed to it when
	// its holder lets it go.
	ss.send(&fencedv1.SessionRequest{Id: 10, Call: &fencedv1.SessionRequest_Cancel{Cancel: &fencedv1.SessionCancel{}}})
	errorCode(t, "cancelled wait", ss.answer(10), connect.CodeCanceled)
	awaitWaiters(t, s, 0)
	if _, err := unary.lease.Release(ctx, connect.NewRequest(&fencedv1.ReleaseRequest{Key: "s/held", LeaseId: held.Msg.GetLease().GetLeaseId()})); err != nil {
		t.Fatal(err)
	}
	if l, ok := s.currentOf("s/held"); ok {
		t.Fatalf("s/held went to %v after the cancelled wait", l)
	}
	// A cancel of a call that is not in progress is ignored.
	ss.send(&fencedv1.SessionRequest{Id: 99, Call: &fencedv1.SessionRequest_Cancel{Cancel: &fencedv1.SessionCancel{}}})
	if ss.call(sessionAcquire(18, "s/3", 0, 0)).GetAcquire() == nil {
		t.Fatal("the stream no longer grants")
	}

	if err := ss.stream.CloseRequest(); err != nil {
		t.Fatal(err)
	}
	if resp, err := ss.next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the client closed its side: %v %v, want the end of the stream", resp, err)
	}
	// Acquire: 1 unary, and the session's 1, 10, 12, 14, 16, 18; Release:
	// the session's 11 and 1 unary; Renew: the session's 2 and 13.
	for method, want := range map[string]uint64{"Acquire": 7, "Release": 2, "Renew": 2} {
		if got := requestCount(t, s, method); got != want {
			t.Errorf("fenced_request_duration_seconds{method=%q} counts %d calls, want %d", method, got, want)
		}
	}
}

// requestCount is the number of calls of method in
// fenced_request_duration_seconds.
func requestCount(t *testing.T, s *Server, method string) uint64 {
	t.Helper()
	families, err := s.cfg.Gatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "fenced_request_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "method" && l.GetValue() == method {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}

// Session streams are capped per client address and per server
// (resource_exhausted naming the limit, counted); a stream that ends
// gives its place back. Each call a stream carries takes one of its
// client's calls in progress, as a unary call does.
func TestSessionLimits(t *testing.T) {
	s, base := serveAPI(t, Config{MaxSessions: 2, MaxSessionsPerClient: 1, MaxCallsPerClient: 2})
	// open opens a session from ip; it holds its place once a call is
	// answered.
	open := func(ip string) (*testSession, error) {
		ss := openSession(t, h2cFrom(t, base, ip, ""))
		ss.send(sessionRenew(1, "k", "00"))
		resp, err := ss.next()
		if err == nil && resp.GetError().GetCode() != "not_found" {
			t.Fatalf("renewal of an unknown lease: %v", resp)
		}
		return ss, err
	}
	first, err := open("127.0.0.1")
	if err != nil {
		t.Fatalf("first session: %v", err)
	}
	_, err = open("127.0.0.1")
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "per client") {
		t.Fatalf("second session from one client: %v, want resource_exhausted naming the per-client limit", err)
	}
	if _, err := open("127.0.0.2"); err != nil {
		t.Fatalf("session from another client within the server's limit: %v", err)
	}
	_, err = open("127.0.0.3")
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "on this server (limit 2)") {
		t.Fatalf("third session: %v, want resource_exhausted naming the server's limit", err)
	}
	for _, limit := range []string{"max-sessions", "max-sessions-per-client"} {
		if n := limitRefusals(t, s, limit); n != 1 {
			t.Errorf("fenced_limit_refusals_total{limit=%q} = %v, want 1", limit, n)
		}
	}

	// Two unary calls in progress from 127.0.0.1 take its calls: the
	// session's next call is refused as a unary call would be.
	c1, _ := stallCall(t, base, "127.0.0.1")
	c2, _ := stallCall(t, base, "127.0.0.1")
	waitCalls(t, s, "127.0.0.1", 2)
	e := errorCode(t, "a call beyond the client's calls in progress", first.call(sessionAcquire(2, "lim/1", 0, 0)), connect.CodeResourceExhausted)
	if !strings.Contains(e.GetMessage(), "max-calls-per-client") {
		t.Fatalf("refusal %q does not name max-calls-per-client", e.GetMessage())
	}
	if n := limitRefusals(t, s, "max-calls-per-client"); n != 1 {
		t.Errorf("fenced_limit_refusals_total{limit=\"max-calls-per-client\"} = %v, want 1", n)
	}
	c1.Close()
	c2.Close()
	waitCalls(t, s, "127.0.0.1", 0)
	if first.call(sessionAcquire(3, "lim/1", 0, 0)).GetAcquire() == nil {
		t.Fatal("the session's call refused once its client's calls were free")
	}

	// The first session ends: its client may open another.
	if err := first.stream.CloseRequest(); err != nil {
		t.Fatal(err)
	}
	if _, err := first.next(); !errors.Is(err, io.EOF) {
		t.Fatalf("end of the first session: %v", err)
	}
	if _, err := open("127.0.0.1"); err != nil {
		t.Fatalf("a session in the place of one that ended: %v", err)
	}
}

// Session needs HTTP/2: over HTTP/1.1 it is refused with 505 and a body
// that says what to use instead.
func TestSessionOverHTTP1Refused(t *testing.T) {
	_, base := serveAPI(t, Config{})
	body := `{"id":"1","renew":{"key":"k","leaseId":"00"}}`
	env := string([]byte{0, 0, 0, 0, byte(len(body))}) + body
	resp, err := http.Post(base+fencedv1connect.LeaseServiceSessionProcedure, "application/connect+json", strings.NewReader(env))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusHTTPVersionNotSupported || !strings.Contains(string(b), "Session is a bidirectional stream and needs HTTP/2") {
		t.Fatalf("Session over HTTP/1.1: %d %q, want 505 saying it needs HTTP/2", resp.StatusCode, b)
	}
}

// With auth on, the stream's credentials authorize each call for its own
// key and lease, as they would the unary call: a refused call is answered
// permission_denied and the stream goes on; a stream without credentials
// is refused.
func TestSessionAuthorizesEachCall(t *testing.T) {
	_, base := serveAPI(t, Config{AuthFile: writePolicy(t, testPolicy())})
	alice := openSession(t, h2cFrom(t, base, "127.0.0.1", aliceSecret))
	l := alice.call(sessionAcquire(1, "a/1", 0, 0)).GetAcquire().GetLease()
	if l.GetOwner() != "alice" {
		t.Fatalf("alice's acquisition: %v, want a lease owned by alice", l)
	}
	errorCode(t, "alice acquiring outside her prefix", alice.call(sessionAcquire(2, "b/1", 0, 0)), connect.CodePermissionDenied)
	bob := openSession(t, h2cFrom(t, base, "127.0.0.1", bobSecret))
	errorCode(t, "bob releasing alice's lease", bob.call(sessionRelease(1, "a/1", l.GetLeaseId())), connect.CodePermissionDenied)
	errorCode(t, "bob renewing alice's lease", bob.call(sessionRenew(2, "a/1", l.GetLeaseId())), connect.CodePermissionDenied)
	if alice.call(sessionRelease(3, "a/1", l.GetLeaseId())).GetRelease() == nil {
		t.Fatal("alice could not release her lease")
	}
	anon := openSession(t, h2cFrom(t, base, "127.0.0.1", ""))
	anon.send(sessionAcquire(1, "a/2", 0, 0))
	if _, err := anon.next(); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("session without credentials: %v, want unauthenticated", err)
	}
}

// A node shuts down promptly with Session streams open: one idle, its
// reader waiting for a request that never comes, one with an acquisition
// waiting in line. Both streams end, the idle one with unavailable, the
// waiting call without a grant.
func TestSessionShutdownWithOpenStreams(t *testing.T) {
	s, base := serveAPI(t, Config{})
	unary := newH2CCaller(base, "")
	if _, err := unary.lease.Acquire(context.Background(), connect.NewRequest(&fencedv1.AcquireRequest{Key: "k", Owner: "A", TtlMs: 60_000})); err != nil {
		t.Fatal(err)
	}
	idle := openSession(t, h2cFrom(t, base, "127.0.0.1", ""))
	errorCode(t, "renewal", idle.call(sessionRenew(1, "k", "00")), connect.CodeNotFound)
	waiting := openSession(t, h2cFrom(t, base, "127.0.0.2", ""))
	waiting.send(sessionAcquire(1, "k", 60_000, 0))
	awaitWaiters(t, s, 1)

	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		// Close gives the HTTP server's drain 5 s: an error would say the
		// streams held it up until then.
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(4 * time.Second):
		t.Fatal("Close still waits for the Session streams")
	}
	if resp, err := idle.next(); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("the idle stream after the shutdown: %v %v, want its end with unavailable", resp, err)
	}
	for {
		resp, err := waiting.next()
		if err != nil {
			break
		}
		if resp.GetAcquire() != nil || resp.GetError() == nil {
			t.Fatalf("the waiting call answered %v at shutdown, want an error", resp)
		}
	}
}
