package client

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"connectrpc.com/connect"
)

// Going to the leader
//
// In a cluster every node serves every call, but a follower forwards each
// write to the leader: a second request for the cluster to serve and a
// second round trip for the call. (On one 2-core machine, 64 clients did
// about three times the acquisitions per second on a 3-node cluster when
// they all went to the leader than when they were spread over the nodes.)
// So a client with several endpoints asks them who leads (GET /v1/role,
// which every node answers without credentials) in the background, at its
// first call and after each failover, and makes the leader the endpoint in
// use. Nothing else changes: calls fail over as described in endpoints.go,
// and a client whose endpoints do not answer the question (a proxy, an
// older server) goes round them as before.

// leaderTimeout bounds one search for the leader.
const leaderTimeout = 2 * time.Second

// lookForLeader starts a search for the leader among the endpoints unless
// one is under way or there is a single endpoint.
func (l *endpointList) lookForLeader() {
	p := l.eps.Load()
	eps := *p
	if len(eps) < 2 || l.roleClient == nil || l.bg.closing() || !l.searching.CompareAndSwap(false, true) {
		return
	}
	l.bg.goFn(func() {
		defer l.searching.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), leaderTimeout)
		defer cancel()
		found := make(chan int, len(eps)) // the index of the leader, or -1
		for i, ep := range eps {
			l.bg.goFn(func() {
				if leads(ctx, l.roleClient, ep.url, &l.pin) {
					found <- i
				} else {
					found <- -1
				}
			})
		}
		for range eps {
			if i := <-found; i >= 0 {
				if l.eps.Load() == p && l.current.Swap(int32(i)) != int32(i) { // not replaced by a sync meanwhile
					l.moved()
				}
				return
			}
		}
	})
}

// leads reports whether the node at url says it is the leader and serves
// acquisitions, and does not belong to another cluster than the pinned one.
func leads(ctx context.Context, hc connect.HTTPClient, url string, pin *clusterPin) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/role", nil)
	if err != nil {
		return false
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	if pin.foreign(url, resp.Header.Get(ClusterIDHeader)) != nil {
		return false
	}
	var role struct {
		Role  string `json:"role"`
		Ready bool   `json:"ready"`
	}
	return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&role) == nil &&
		role.Role == "leader" && role.Ready
}
