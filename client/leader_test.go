package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/internal/fencedtest"
	"github.com/fencedio/fenced/internal/testutil"
)

// roleServer serves srv's API and answers GET /v1/role as a leader or a
// follower; it counts the API calls it serves.
type roleServer struct {
	*httptest.Server
	leader atomic.Bool
	calls  atomic.Int64
}

func newRoleServer(t *testing.T, srv *fencedtest.Server) *roleServer {
	rs := &roleServer{}
	rs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/role" {
			role := `{"role":"follower","ready":false}`
			if rs.leader.Load() {
				role = `{"role":"leader","ready":true}`
			}
			fmt.Fprint(w, role)
			return
		}
		// A Session stream is not a call: over HTTP/1.1 it is an HTTP/2
		// preface (PRI *), after which calls go unary.
		if r.Method != "PRI" && r.URL.Path != fencedv1connect.LeaseServiceSessionProcedure {
			rs.calls.Add(1)
		}
		srv.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(rs.Close)
	return rs
}

// A client with several endpoints sends its calls to the one that says it
// leads, and looks again after a failover.
func TestCallsGoToTheLeader(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	nodes := []*roleServer{newRoleServer(t, srv), newRoleServer(t, srv), newRoleServer(t, srv)}
	nodes[2].leader.Store(true)
	c, err := client.New(client.Config{Endpoints: []string{nodes[0].URL, nodes[1].URL, nodes[2].URL}, TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseIdleConnections()
	ctx := context.Background()
	cycles := func() {
		t.Helper()
		for range 10 {
			l, err := c.Acquire(ctx, "leader/1")
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The first call starts the search and goes to the first endpoint.
	testutil.Eventually(t, 5*time.Second, func() error {
		before := nodes[2].calls.Load()
		if _, err := c.Get(ctx, "leader/1"); err != nil {
			return err
		}
		if nodes[2].calls.Load() == before {
			return errors.New("the call did not go to the leader")
		}
		return nil
	})
	before := [3]int64{nodes[0].calls.Load(), nodes[1].calls.Load(), nodes[2].calls.Load()}
	cycles()
	if got := nodes[2].calls.Load() - before[2]; got != 20 || nodes[0].calls.Load() != before[0] || nodes[1].calls.Load() != before[1] {
		t.Fatalf("%d of 20 calls went to the leader", got)
	}

	// The leader goes away and another node leads: after the failover the
	// client finds the new leader.
	nodes[1].leader.Store(true)
	nodes[2].CloseClientConnections()
	nodes[2].Close()
	testutil.Eventually(t, 5*time.Second, func() error {
		before := nodes[1].calls.Load()
		if _, err := c.Get(ctx, "leader/1"); err != nil {
			return err
		}
		if nodes[1].calls.Load() == before {
			return errors.New("the call did not go to the new leader")
		}
		return nil
	})
	before = [3]int64{nodes[0].calls.Load(), nodes[1].calls.Load(), 0}
	cycles()
	if got := nodes[1].calls.Load() - before[1]; got != 20 || nodes[0].calls.Load() != before[0] {
		t.Fatalf("%d of 20 calls went to the new leader", got)
	}
}

// A renewal stream opened before the client found the leader moves there.
func TestRenewalStreamFollowsTheLeader(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	var nodes []*countingServer
	release := make(chan struct{})
	for i := range 2 {
		cs := &countingServer{calls: map[string]int{}}
		cs.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/role" {
				<-release // the answer comes after the first renewals
				if i == 1 {
					fmt.Fprint(w, `{"role":"leader","ready":true}`)
				} else {
					fmt.Fprint(w, `{"role":"follower"}`)
				}
				return
			}
			cs.mu.Lock()
			cs.calls[r.URL.Path]++
			cs.mu.Unlock()
			srv.Handler().ServeHTTP(w, r)
		}))
		cs.Config.Protocols = new(http.Protocols)
		cs.Config.Protocols.SetHTTP1(true)
		cs.Config.Protocols.SetUnencryptedHTTP2(true)
		cs.Start()
		t.Cleanup(cs.Close)
		nodes = append(nodes, cs)
	}
	var once sync.Once
	answer := func() { once.Do(func() { close(release) }) }
	t.Cleanup(answer) // before the servers close, which waits for handlers
	c, err := client.New(realTimeRenewals(client.Config{Endpoints: []string{nodes[0].URL, nodes[1].URL}}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseIdleConnections()
	ctx := context.Background()
	l, err := c.Acquire(ctx, "follow/1")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	renewedTimes(t, []*client.Lease{l}, 2, renewEvery)
	answer()
	renewedTimes(t, []*client.Lease{l}, 4, renewEvery)
	if a, b := nodes[0].count(fencedv1connect.LeaseServiceKeepAliveProcedure), nodes[1].count(fencedv1connect.LeaseServiceKeepAliveProcedure); a != 1 || b != 1 {
		t.Errorf("streams: %d at the follower, %d at the leader; want one each (it moved)", a, b)
	}
}
