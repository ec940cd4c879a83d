package client

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"connectrpc.com/connect"
)

// Pinning the cluster
//
// Tokens increase per key within one cluster; two clusters (endpoints
// listed by mistake, or a cluster restored from a backup next to an old
// member) have two token histories. So a client pins one cluster: every
// node answers with its cluster's ID (ClusterIDHeader), the client keeps
// the first ID it sees (or Config.ClusterID), and an answer that names
// another cluster is never used: its endpoint counts as unavailable, so the
// call goes on at the next endpoint, as after a connection failure. The
// first such answer of each endpoint is logged at error level
// (Config.Logger); a call that finds no endpoint of the pinned cluster
// fails with a *ClusterMismatchError (ErrClusterMismatch, and
// ErrUnavailable).
//
// An Acquire answered by another cluster may have been granted there. That
// grant is never seen, nor renewed, and its token belongs to the other
// cluster's history: it neither counts as a possible grant of the pinned
// cluster (ErrAcquireUncertain) nor fences anything of its keys.
//
// Not guaranteed: an answer without the header (a server older than the
// header, a node of no cluster yet) is accepted, and neither pins nor is
// checked. The search for the leader and Sync skip nodes whose /v1/role
// names another cluster, but do not pin. A node sends a stream's headers
// with its first message, so a Watch opened at a node of another cluster
// fails over only when that node has a first event to send.

// ClusterIDHeader is the response header in which a node names its
// cluster (hex).
const ClusterIDHeader = "Fenced-Cluster-Id"

// ErrClusterMismatch is matched by *ClusterMismatchError.
var ErrClusterMismatch = errors.New("endpoint belongs to another cluster")

// ClusterMismatchError says that an endpoint answered for another cluster
// than the one the client is pinned to. Its answer was not used.
type ClusterMismatchError struct {
	Endpoint string
	Pinned   string // the client's cluster
	Got      string // the endpoint's
}

func (e *ClusterMismatchError) Error() string {
	return fmt.Sprintf("%v: %s answered for cluster %s, but this client is pinned to cluster %s; "+
		"its answer was not used (tokens of two clusters are not comparable: check the endpoints)",
		ErrClusterMismatch, e.Endpoint, e.Got, e.Pinned)
}

// Is makes ClusterMismatchError match ErrClusterMismatch.
func (e *ClusterMismatchError) Is(target error) bool { return target == ErrClusterMismatch }

// clusterPin is the cluster a client is pinned to.
type clusterPin struct {
	id       atomic.Pointer[string] // nil until pinned
	log      *slog.Logger
	reported sync.Map // endpoint URL: its mismatch was logged
}

func (p *clusterPin) pinned() string {
	if id := p.id.Load(); id != nil {
		return *id
	}
	return ""
}

// check pins got unless a cluster is pinned already, and returns a
// *ClusterMismatchError if got names another. got "" is accepted.
func (p *clusterPin) check(endpoint, got string) error {
	if got == "" || p.id.CompareAndSwap(nil, &got) {
		return nil
	}
	return p.foreign(endpoint, got)
}

// foreign returns a *ClusterMismatchError if got names another cluster
// than the pinned one, without pinning.
func (p *clusterPin) foreign(endpoint, got string) error {
	pinned := p.pinned()
	if got == "" || pinned == "" || got == pinned {
		return nil
	}
	err := &ClusterMismatchError{Endpoint: endpoint, Pinned: pinned, Got: got}
	if _, seen := p.reported.LoadOrStore(endpoint, true); !seen {
		p.log.Error("fenced client: an endpoint belongs to another cluster; its answers are not used",
			"endpoint", endpoint, "pinned_cluster", pinned, "endpoint_cluster", got, "error", err)
	}
	return err
}

// pinnedClient is an endpoint's HTTP client: it refuses answers of another
// cluster before connect reads them (as unavailable, since the error is
// not a *connect.Error).
type pinnedClient struct {
	next     connect.HTTPClient
	endpoint string
	pin      *clusterPin
}

func (c pinnedClient) Do(r *http.Request) (*http.Response, error) {
	resp, err := c.next.Do(r)
	if err != nil {
		return resp, err
	}
	if err := c.pin.check(c.endpoint, resp.Header.Get(ClusterIDHeader)); err != nil {
		resp.Body.Close()
		return nil, err
	}
	return resp, nil
}

func isHex(s string) bool {
	return strings.Trim(s, "0123456789abcdef") == ""
}
