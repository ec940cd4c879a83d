package client

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
)

// Several endpoints
//
// Every node of a cluster serves every call (followers forward to the
// leader), so a client may be given any or all of them. A call goes to the
// endpoint that answered last; when an endpoint cannot be reached, cuts
// the connection before answering (reported as unavailable, never as
// canceled, which only the caller's own context causes), or answers
// unavailable (no leader yet, a node shutting down, a leader that stepped
// down), the call is sent to the next endpoint, going round the list
// with a growing pause between rounds until the call's context ends or
// Config.FailoverTimeout passes. No other error is retried.
//
// A Lease is not tied to an endpoint: its renewals fail over like any other
// call, and it keeps its ID, token and context as long as the server still
// holds it (a new leader gives every lease a fresh TTL).
//
// An Acquire cut short by a failover (the node died, or stopped leading,
// after writing the grant and before answering) may have been granted: the
// caller never sees that grant, which nobody renews, so it expires after
// its TTL. Retrying such an Acquire on the next endpoint cannot give the
// caller two grants it knows of: the retry either gets the key (the first
// attempt did not take it, or its grant expired while a wait went on), or
// finds it held. Found held by the caller's own owner, the holder is most
// likely the unseen grant, so Acquire reports ErrAcquireUncertain (the
// caller may hold the key until that grant's TTL runs out) instead of
// "held by another". Tokens keep increasing either way.

// endpoint is one node's clients.
type endpoint struct {
	url     string
	rpc     fencedv1connect.LeaseServiceClient // unary calls
	streams fencedv1connect.LeaseServiceClient // Watch and KeepAlive
	admin   fencedv1connect.AdminServiceClient // Revoke
	// rejections: ReportRejections, ListRejections
	rejections fencedv1connect.RejectionServiceClient
	session    *session // Acquire, Renew and Release; nil with Config.DisableSession
}

// endpointList is the client's endpoints and the one in use. The list is
// replaced whole when the client syncs it from the cluster (sync.go); each
// use reads it once.
type endpointList struct {
	eps     atomic.Pointer[[]endpoint]
	current atomic.Int32
	timeout time.Duration // Config.FailoverTimeout
	pin     clusterPin    // the cluster every answer must come from (pin.go)

	// For the search for the leader (leader.go).
	roleClient connect.HTTPClient
	bg         *background // counts the searches for the leader
	started    atomic.Bool // a first search was started
	searching  atomic.Bool
	// moved is called when another endpoint has become the one in use.
	moved func()
}

// normalizeEndpoints merges Endpoint and Endpoints: Endpoints, else
// Endpoint, else the default node.
func normalizeEndpoints(c *Config) error {
	if len(c.Endpoints) == 0 {
		if c.Endpoint == "" {
			c.Endpoint = "http://127.0.0.1:7420"
		}
		c.Endpoints = []string{c.Endpoint}
	}
	seen := map[string]bool{}
	for i, e := range c.Endpoints {
		e = strings.TrimRight(strings.TrimSpace(e), "/")
		if e == "" {
			return fmt.Errorf("client config: endpoint %d is empty", i)
		}
		if !strings.Contains(e, "://") {
			e = "http://" + e
		}
		if seen[e] {
			return fmt.Errorf("client config: endpoint %s is listed twice", e)
		}
		seen[e] = true
		c.Endpoints[i] = e
	}
	if c.Endpoint == "" {
		c.Endpoint = c.Endpoints[0]
	}
	return nil
}

// ParseEndpoints splits a comma-separated list of endpoints, as
// --endpoints and FENCED_ENDPOINTS give them.
func ParseEndpoints(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// list returns the endpoints.
func (l *endpointList) list() []endpoint { return *l.eps.Load() }

func (l *endpointList) pick() (int, endpoint) {
	eps := l.list()
	i := int(l.current.Load()) % len(eps)
	return i, eps[i]
}

// failedOver moves on from endpoint i, unless another call already did,
// and looks for the leader.
func (l *endpointList) failedOver(i int) {
	if l.current.CompareAndSwap(int32(i), int32((i+1)%len(l.list()))) {
		l.moved()
		l.lookForLeader()
	}
}

// cutIsUnavailable makes a unary call that failed with canceled although
// its context had not ended fail with unavailable instead. connect-go
// reports a connection reset or a broken pipe (the node died, or something
// between cut the connection) as canceled, yet the caller cancelled
// nothing: the node could not serve the call, which goes to the next
// endpoint like any other, and an Acquire's attempt counts as possibly
// granted.
type cutIsUnavailable struct{}

func (cutIsUnavailable) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		resp, err := next(ctx, req)
		if err != nil && connect.CodeOf(err) == connect.CodeCanceled && ctx.Err() == nil {
			err = connect.NewError(connect.CodeUnavailable, err)
		}
		return resp, err
	}
}

func (cutIsUnavailable) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (cutIsUnavailable) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// retryable reports whether err says the call did not reach a node able to
// serve it: the endpoint is unreachable or has no leader to serve it.
func retryable(err error) bool {
	return connect.CodeOf(err) == connect.CodeUnavailable
}

// do runs call against the endpoints until one serves it, as described
// above. call's error is returned as is.
func (l *endpointList) do(ctx context.Context, call func(endpoint) error) error {
	if eps := l.list(); len(eps) == 1 {
		return call(eps[0])
	}
	if !l.started.Load() && l.started.CompareAndSwap(false, true) {
		l.lookForLeader()
	}
	// A call goes to the endpoint that answered last; a call whose context
	// ended while waiting for a node moves the next call on to the next
	// node.
	start := time.Now()
	pause := 50 * time.Millisecond
	tried := 0
	for {
		i, ep := l.pick()
		err := call(ep)
		if err != nil && ctx.Err() != nil {
			// The node did not answer in time (it may be paused or cut
			// off): the next call starts at the next node.
			l.failedOver(i)
			return err
		}
		if err == nil || !retryable(err) {
			return err
		}
		l.failedOver(i)
		tried++
		if tried%len(l.list()) != 0 {
			continue
		}
		// A full round failed: every node is down or between leaders.
		if time.Since(start)+pause > l.timeout {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		pause = min(2*pause, time.Second)
	}
}
