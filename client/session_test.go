package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/client"
	"google.golang.org/protobuf/proto"
)

// sessionClient is fakeClient after its Session stream to fake was tried:
// the first call to an endpoint goes unary and starts the stream's probe,
// and the calls after the probe's answer go over the stream.
func sessionClient(t *testing.T, fake *fakeService, cfg client.Config) *client.Client {
	t.Helper()
	c := fakeClient(t, fake, cfg)
	if _, err := c.Renew(context.Background(), "warm-up", "0123"); err != nil {
		t.Fatal(err)
	}
	synctest.Wait()
	return c
}

// Acquire, Renew and Release go over one Session stream, shared by the
// calls after the first.
func TestSessionCarriesCalls(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fake := &fakeService{}
		c := sessionClient(t, fake, client.Config{TTL: time.Minute})
		ctx := context.Background()
		const cycles = 5
		for i := range cycles {
			l, err := c.Acquire(ctx, fmt.Sprintf("s/%d", i))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Renew(ctx, l.Key(), l.ID()); err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if streams, calls := fake.sessionCounts(); streams != 1 || calls != 3*cycles {
			t.Fatalf("%d Session streams carried %d calls, want 1 carrying %d", streams, calls, 3*cycles)
		}
	})
}

// DisableSession sends every call unary.
func TestDisableSession(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fake := &fakeService{}
		c := sessionClient(t, fake, client.Config{TTL: time.Minute, DisableSession: true})
		for range 3 {
			l, err := c.Acquire(context.Background(), "d/1")
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		if streams, calls := fake.sessionCounts(); streams != 0 || calls != 0 {
			t.Fatalf("%d Session streams, %d calls on them; want none", streams, calls)
		}
	})
}

// Against a server without Session, calls go unary, and the stream is
// tried again only after pauses of 1s, 2s, 4s... up to a minute.
func TestSessionRefusedFallsBackToUnary(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fake := &fakeService{noSession: true}
		c := fakeClient(t, fake, client.Config{TTL: time.Minute})
		ctx := context.Background()
		start := time.Now()
		for time.Since(start) < 2*time.Minute {
			l, err := c.Acquire(ctx, "u/1")
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		// Tries at 0, 1, 3, 7, 15, 31, 63 and 123s: each after a pause
		// twice the last, up to a minute, so 7 within two minutes.
		if streams, calls := fake.sessionCounts(); streams != 7 || calls != 0 {
			t.Fatalf("%d Session streams tried in 2 min with %d calls on them, want 7 and none", streams, calls)
		}
	})
}

// Over HTTP/1.1, which cannot carry the stream, calls go unary.
func TestSessionOverHTTP1FallsBackToUnary(t *testing.T) {
	t.Parallel()
	fake := &fakeService{}
	_, h := fencedv1connect.NewLeaseServiceHandler(fake)
	for _, tc := range []struct {
		name        string
		serverHTTP2 bool
		clientHTTP1 bool
	}{
		{"server speaks HTTP/1.1 only", false, false},
		{"client speaks HTTP/1.1 only", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := httptest.NewUnstartedServer(h)
			ts.Config.Protocols = new(http.Protocols)
			ts.Config.Protocols.SetHTTP1(true)
			ts.Config.Protocols.SetUnencryptedHTTP2(tc.serverHTTP2)
			ts.Start()
			defer ts.Close()
			cfg := client.Config{Endpoint: ts.URL, TTL: time.Minute}
			if tc.clientHTTP1 {
				tr := &http.Transport{}
				defer tr.CloseIdleConnections()
				cfg.HTTPClient = &http.Client{Transport: tr}
			}
			c, err := client.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			for range 20 {
				l, err := c.Acquire(ctx, "h1/1")
				if err != nil {
					t.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if _, calls := fake.sessionCounts(); calls != 0 {
				t.Fatalf("%d calls over Session, want none", calls)
			}
		})
	}
}

// cutSessions serves Session but ends the stream, without an answer, on
// the first call of the kind cut ("acquire", "release") after applying it,
// as a node that dies between commit and answer.
type cutSessions struct {
	fakeService
	cut     string
	applied int
}

func (s *cutSessions) Session(ctx context.Context, stream *connect.BidiStream[fencedv1.SessionRequest, fencedv1.SessionResponse]) error {
	for {
		req, err := stream.Receive()
		if err != nil {
			return nil
		}
		if (s.cut == "acquire" && req.GetAcquire() != nil) || (s.cut == "release" && req.GetRelease() != nil) {
			s.mu.Lock()
			s.applied++
			s.mu.Unlock()
			return connect.NewError(connect.CodeUnavailable, errors.New("node died"))
		}
		if err := stream.Send(s.serve(ctx, req)); err != nil {
			return nil
		}
	}
}

// heldByOwner answers Acquire "held" by the owner of the caller, and
// Release not_found: what the next node answers after a grant or a release
// applied without an answer.
type heldByOwner struct{ fakeService }

func (*heldByOwner) Acquire(_ context.Context, req *connect.Request[fencedv1.AcquireRequest]) (*connect.Response[fencedv1.AcquireResponse], error) {
	err := connect.NewError(connect.CodeFailedPrecondition, errors.New("held"))
	d, _ := connect.NewErrorDetail(&fencedv1.LeaseHeld{Key: req.Msg.Key, Owner: req.Msg.Owner, Token: 7, RemainingMs: 9000})
	err.AddDetail(d)
	return nil, err
}

func (*heldByOwner) Release(context.Context, *connect.Request[fencedv1.ReleaseRequest]) (*connect.Response[fencedv1.ReleaseResponse], error) {
	return nil, connect.NewError(connect.CodeNotFound, errors.New("not the current lease"))
}

// hosts carries each request in process to the handler of its host.
type hosts map[string]http.Handler

func (h hosts) Do(req *http.Request) (*http.Response, error) {
	if handler, ok := h[req.URL.Host]; ok {
		return inProcess{handler}.Do(req)
	}
	return nil, fmt.Errorf("no host %s", req.URL.Host)
}

// A call whose stream ends after it was sent has an unknown outcome, as a
// unary call cut after sending: with one endpoint it fails as unavailable,
// never as held or not held; with two, the retry at the next node reports
// an Acquire uncertain and a Release done, as after a unary cut.
func TestSessionCutAfterSend(t *testing.T) {
	t.Parallel()
	for _, call := range []string{"acquire", "release"} {
		for _, endpoints := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/%d endpoints", call, endpoints), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					cut := &cutSessions{cut: call}
					_, a := fencedv1connect.NewLeaseServiceHandler(cut)
					_, b := fencedv1connect.NewLeaseServiceHandler(&heldByOwner{fakeService{noSession: true}})
					cfg := client.Config{Endpoints: []string{"http://a.fenced.test", "http://b.fenced.test"}[:endpoints],
						HTTPClient: hosts{"a.fenced.test": a, "b.fenced.test": b}, TTL: time.Minute, Owner: "me"}
					c, err := client.New(cfg)
					if err != nil {
						t.Fatal(err)
					}
					defer c.Close()
					ctx := context.Background()
					// The first call goes unary and starts the probe.
					if _, err := c.Renew(ctx, "warm-up", "0123"); err != nil {
						t.Fatal(err)
					}
					synctest.Wait()
					if call == "acquire" {
						_, err = c.Acquire(ctx, "c/1")
					} else {
						err = c.Release(ctx, "c/1", "0123456789abcdef0123456789abcdef")
					}
					cut.mu.Lock()
					applied := cut.applied
					cut.mu.Unlock()
					if applied != 1 {
						t.Fatalf("%d calls cut on the stream, want 1", applied)
					}
					switch {
					case endpoints == 1 && (!errors.Is(err, client.ErrUnavailable) || errors.Is(err, client.ErrHeld) || errors.Is(err, client.ErrNotHeld)):
						t.Fatalf("%s cut after send: %v, want ErrUnavailable", call, err)
					case endpoints == 2 && call == "acquire" && !errors.Is(err, client.ErrAcquireUncertain):
						t.Fatalf("acquire cut after send, then held by its owner: %v, want ErrAcquireUncertain", err)
					case endpoints == 2 && call == "release" && err != nil:
						t.Fatalf("release cut after send, then not found: %v, want nil (gone)", err)
					}
				})
			})
		}
	}
}

// A call whose context ends cancels it on the stream and returns the
// context's error; the stream carries on.
func TestSessionCancel(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fake := &fakeService{}
		c := sessionClient(t, fake, client.Config{TTL: time.Minute})
		fake.mu.Lock()
		fake.acquireDelay = time.Hour
		fake.mu.Unlock()
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(time.Second, cancel)
		start := time.Now()
		_, err := c.Acquire(ctx, "x/1")
		if !errors.Is(err, context.Canceled) || time.Since(start) != time.Second {
			t.Fatalf("cancelled after 1s: %v after %v, want context.Canceled after 1s", err, time.Since(start))
		}
		ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err = c.Acquire(ctx, "x/2")
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 3*time.Second {
			t.Fatalf("deadline of 2s: %v after %v, want context.DeadlineExceeded after 2s", err, time.Since(start)-time.Second)
		}
		synctest.Wait()
		// Both acquisitions ended on the server: the cancel, and the
		// deadline sent with the call. The stream serves on.
		fake.mu.Lock()
		fake.acquireDelay = 0
		fake.mu.Unlock()
		if _, err := c.Acquire(context.Background(), "x/3"); err != nil {
			t.Fatal(err)
		}
		if streams, calls := fake.sessionCounts(); streams != 1 || calls != 3 {
			t.Fatalf("%d Session streams carried %d calls, want 1 carrying 3", streams, calls)
		}
		if n := fake.pending(); n != 0 {
			t.Fatalf("%d calls still running on the server", n)
		}
	})
}

// slowGrant grants every Acquire after a delay, whatever the caller does.
type slowGrant struct {
	fakeService
	grantAfter time.Duration
}

func (s *slowGrant) Session(ctx context.Context, stream *connect.BidiStream[fencedv1.SessionRequest, fencedv1.SessionResponse]) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	var sendMu sync.Mutex
	for {
		req, err := stream.Receive()
		if err != nil {
			return nil
		}
		if a := req.GetAcquire(); a != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(s.grantAfter)
				sendMu.Lock()
				defer sendMu.Unlock()
				stream.Send(&fencedv1.SessionResponse{Id: req.GetId(), Result: &fencedv1.SessionResponse_Acquire{Acquire: &fencedv1.AcquireResponse{
					Lease: &fencedv1.Lease{Key: a.Key, LeaseId: proto.String("granted-late"), Token: 9, TtlMs: a.TtlMs}}}})
			}()
			continue
		}
		if req.GetCancel() != nil {
			continue
		}
		resp := s.serve(ctx, req)
		sendMu.Lock()
		stream.Send(resp)
		sendMu.Unlock()
	}
}

// A grant that comes after its Acquire's caller gave up is released: the
// caller never saw it, and nobody would renew it.
func TestSessionLateGrantReleased(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fake := &slowGrant{grantAfter: 3 * time.Second}
		_, h := fencedv1connect.NewLeaseServiceHandler(fake)
		c, err := client.New(client.Config{Endpoint: "http://fenced.test", HTTPClient: inProcess{h}, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Renew(context.Background(), "warm-up", "0123"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := c.Acquire(ctx, "late/1"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("acquire: %v, want DeadlineExceeded", err)
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if got := fake.released(); len(got) != 1 || got[0] != "granted-late" {
			t.Fatalf("released %q, want the late grant", got)
		}
	})
}

// Calls in flight together share the stream, and each gets its own answer
// whatever the order the answers come in.
func TestSessionPipelinesCalls(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fake := &fakeService{}
		c := sessionClient(t, fake, client.Config{TTL: time.Minute})
		const n = 8
		fake.mu.Lock()
		fake.acquireDelays = map[string]time.Duration{}
		for i := range n {
			// The first sent is answered last.
			fake.acquireDelays[fmt.Sprintf("p/%d", i)] = time.Duration(n-i) * time.Second
		}
		fake.mu.Unlock()
		start := time.Now()
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				key := fmt.Sprintf("p/%d", i)
				l, err := c.Acquire(context.Background(), key)
				if err != nil {
					t.Error(err)
					return
				}
				if l.Key() != key {
					t.Errorf("acquired %q: got the lease of %q", key, l.Key())
				}
				if took := time.Since(start); took != time.Duration(n-i)*time.Second {
					t.Errorf("%s answered after %v, want %v", key, took, time.Duration(n-i)*time.Second)
				}
			})
		}
		wg.Wait()
		if streams, calls := fake.sessionCounts(); streams != 1 || calls != n {
			t.Fatalf("%d Session streams carried %d calls, want 1 carrying %d", streams, calls, n)
		}
	})
}

// withRole answers GET /v1/role as a leader or a follower, and passes the
// rest to h.
func withRole(h http.Handler, leader bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/role" {
			h.ServeHTTP(w, r)
			return
		}
		if leader {
			fmt.Fprint(w, `{"role":"leader","ready":true}`)
		} else {
			fmt.Fprint(w, `{"role":"follower","ready":false}`)
		}
	})
}

// When the client moves to the leader, the stream at the endpoint it left
// ends, and its calls go over a stream at the leader.
func TestSessionFollowsTheLeader(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		follower, leader := &fakeService{}, &fakeService{}
		_, f := fencedv1connect.NewLeaseServiceHandler(follower)
		_, l := fencedv1connect.NewLeaseServiceHandler(leader)
		c, err := client.New(client.Config{Endpoints: []string{"http://a.fenced.test", "http://b.fenced.test"},
			HTTPClient: hosts{"a.fenced.test": withRole(f, false), "b.fenced.test": withRole(l, true)}, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx := context.Background()
		// The first call goes to the first endpoint and starts the search.
		if _, err := c.Renew(ctx, "warm-up", "0123"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		cycle := func() {
			lease, err := c.Acquire(ctx, "lead/1")
			if err != nil {
				t.Fatal(err)
			}
			if err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
			synctest.Wait() // the leader's stream answers its probe
		}
		// Whether the first calls at the leader go unary depends on
		// whether its stream's probe was answered before them: count
		// from the second cycle on.
		cycle()
		_, before := leader.sessionCounts()
		for range 4 {
			cycle()
		}
		follower.mu.Lock()
		opened, ended := follower.sessions, follower.sessionsEnded
		follower.mu.Unlock()
		if opened != ended {
			t.Errorf("follower: %d Session streams opened, %d ended; want every one ended", opened, ended)
		}
		if streams, calls := leader.sessionCounts(); streams != 1 || calls-before != 8 {
			t.Errorf("leader: %d Session streams carried %d calls in the last 4 cycles, want 1 carrying 8", streams, calls-before)
		}
	})
}

// Close ends the streams at once, cutting the calls in flight on them: their
// outcome is unknown, as for a unary call cut after sending.
func TestSessionClose(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fake := &fakeService{}
		_, h := fencedv1connect.NewLeaseServiceHandler(fake)
		c, err := client.New(client.Config{Endpoint: "http://fenced.test", HTTPClient: inProcess{h}, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Renew(context.Background(), "warm-up", "0123"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		fake.mu.Lock()
		fake.acquireDelay = time.Hour
		fake.mu.Unlock()
		done := make(chan error)
		go func() {
			_, err := c.Acquire(context.Background(), "close/1")
			done <- err
		}()
		synctest.Wait()
		start := time.Now()
		c.Close()
		if err := <-done; !errors.Is(err, client.ErrUnavailable) {
			t.Fatalf("acquire in flight at Close: %v, want ErrUnavailable", err)
		}
		if time.Since(start) != 0 {
			t.Fatalf("Close took %v with a call in flight, want no wait", time.Since(start))
		}
		if streams, _ := fake.sessionCounts(); streams != 1 {
			t.Fatalf("%d Session streams, want 1", streams)
		}
	})
}
