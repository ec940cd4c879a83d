package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"connectrpc.com/connect"
)

// Syncing the endpoints
//
// Every member of a cluster advertises the URL its clients reach it at
// (fenced --advertise-client-url), and the cluster records them all, so
// that any node lists every member's (/v1/role, which answers without
// credentials, as for the search for the leader). Sync replaces the
// client's endpoints with that list; Config.AutoSyncInterval does so in the
// background. A call in flight keeps the endpoint it started on; the next
// calls use the new list, starting at the same node if it is still in it.
//
// Not guaranteed: a synced list is what the members said, so a member whose
// URL is wrong for this client (a private address behind NAT) makes calls
// fail over past it. Endpoints that serve as a proxy for the cluster should
// not be synced from it.

// ErrNoClientURLs is returned by Sync when no member advertises a client
// URL (members started without one, or from an older fenced): the
// endpoints are left as they are.
var ErrNoClientURLs = errors.New("no member advertises a client URL")

// syncTimeout bounds one background sync.
const syncTimeout = 5 * time.Second

// Sync asks the cluster for its members' client URLs, trying the endpoints
// in turn from the one in use, and makes them the client's endpoints. On
// an error the endpoints do not change.
func (c *Client) Sync(ctx context.Context) error {
	var errs []error
	eps := c.eps.list()
	start := int(c.eps.current.Load())
	for k := range eps {
		ep := eps[(start+k)%len(eps)]
		urls, err := memberURLs(ctx, c.eps.roleClient, ep.url, &c.eps.pin)
		if err == nil {
			c.setEndpoints(urls)
			return nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("sync endpoints: %w", errors.Join(errs...))
}

// memberURLs returns the client URLs of the members, as the node at url
// lists them, sorted; a node of another cluster than the pinned one
// returns a *ClusterMismatchError.
func memberURLs(ctx context.Context, hc connect.HTTPClient, url string, pin *clusterPin) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/role", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if err := pin.foreign(url, resp.Header.Get(ClusterIDHeader)); err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s/v1/role: %s", url, resp.Status)
	}
	var role struct {
		Members []struct {
			ClientURL string `json:"clientURL"`
		} `json:"members"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&role); err != nil {
		return nil, fmt.Errorf("%s/v1/role: %w", url, err)
	}
	var urls []string
	for _, m := range role.Members {
		if m.ClientURL != "" {
			urls = append(urls, m.ClientURL)
		}
	}
	if len(urls) == 0 {
		return nil, fmt.Errorf("%s: %w", url, ErrNoClientURLs)
	}
	slices.Sort(urls)
	return slices.Compact(urls), nil
}

// Endpoints returns the client's endpoints, as given or as last synced.
func (c *Client) Endpoints() []string {
	eps := c.eps.list()
	out := make([]string, len(eps))
	for i, ep := range eps {
		out[i] = ep.url
	}
	return out
}

// setEndpoints makes urls the endpoints, keeping the one in use if it is
// among them, and looks for the leader among the new ones.
func (c *Client) setEndpoints(urls []string) {
	old := c.eps.list()
	if slices.Equal(urls, c.Endpoints()) {
		return
	}
	_, cur := c.eps.pick()
	eps := make([]endpoint, len(urls))
	at := 0
	for i, u := range urls {
		if j := slices.IndexFunc(old, func(e endpoint) bool { return e.url == u }); j >= 0 {
			eps[i] = old[j] // keep its clients and their connections
		} else {
			eps[i] = c.newEndpoint(u)
		}
		if u == cur.url {
			at = i
		}
	}
	c.eps.eps.Store(&eps)
	c.eps.current.Store(int32(at))
	for _, e := range old {
		if !slices.ContainsFunc(eps, func(n endpoint) bool { return n.url == e.url }) {
			c.sessions.retire(e.session) // once its calls in flight are answered
		}
	}
	c.eps.lookForLeader()
}

// autoSync runs Sync every interval until Close.
func (c *Client) autoSync(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), syncTimeout)
		c.Sync(ctx) // on an error the endpoints stay; the next tick tries again
		cancel()
	}
}

// Close ends the client's leases and waits for everything it runs in the
// background to return, then closes idle connections. Every lease still
// held is lost (its context's cause matches ErrLost and ErrClosed) and
// released as after any loss, each release bounded by
// Config.RequestTimeout; the background sync of the endpoints stops. Then
// the Session streams end: a call still in flight on one fails as
// unavailable, its outcome unknown, as a unary call cut after it was sent.
// Later calls to Acquire return ErrClosed; the other calls still work, as
// unary calls.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		close(c.stop)
		for _, l := range c.bg.close() {
			l.lose(ErrClosed)
		}
	})
	c.bg.wait() // the releases of those leases may use the Session streams
	c.sessions.close()
	c.bg.wait() // the releases of grants whose answers came late
	c.CloseIdleConnections()
	return nil
}
