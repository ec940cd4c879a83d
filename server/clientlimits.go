package server

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/fencedio/fenced/lease"
)

// Limits per client address. Without authentication a client is free to
// name a new owner for every call, so the per-owner quotas alone do not
// stop one client from taking every waiter slot or filling MaxLeases. A
// client is therefore also counted by the IP address its connection comes
// from: MaxConnsPerClient open connections, MaxCallsPerClient calls in
// progress (callslots.go), MaxWaitersPerClient waiting acquisitions and
// MaxLeasesPerClient current leases, each refused beyond its limit
// (resource_exhausted naming it; a connection is closed unread).
//
// The address is the TCP peer's; forwarded headers (X-Forwarded-For,
// Forwarded) are never read, so every client behind one NAT or proxy
// shares one address's limits. A follower forwarding a call to the leader
// names its caller's address (forwardedClientHeader), which the leader
// trusts only over the peer port. Calls through the Go API (Server.Acquire
// without an HTTP request) have no address and are counted only by the
// global limits.
//
// Leases are counted per address by the node that granted them, from the
// grant until the lease ends; the log does not record addresses, so after
// a leader change leases granted by the old leader count against no
// address until they end.

// forwardedClientHeader names the address of the client whose call a
// follower forwards to the leader.
const forwardedClientHeader = "Fenced-Forwarded-Client"

// callInfo is what the API's middleware learns of one request, carried in
// its context as one value that each layer fills in: one allocation and
// one copy of the request for all of them, not one per layer.
type callInfo struct {
	addr   string     // withClientAddr
	slot   callSlot   // limitCalls, when slot.slots is set
	auth   authResult // authenticate, when authed is set
	authed bool
}

type callInfoKey struct{}

// callInfoOf is what is known of ctx's caller; nil when the call did not come over HTTP.
func callInfoOf(ctx context.Context) *callInfo {
	c, _ := ctx.Value(callInfoKey{}).(*callInfo)
	return c
}

// withClientAddr puts the caller's address in the request's context: the
// TCP peer's IP, or over the peer port (peer true) the address a
// forwarding node names. On the public port the header is removed.
func withClientAddr(next http.Handler, peer bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		addr := clientIP(r.RemoteAddr)
		if fwd := r.Header.Get(forwardedClientHeader); peer && fwd != "" {
			addr = fwd
		} else if !peer {
			delete(r.Header, forwardedClientHeader) // canonical already: Header.Del would canonicalize it again
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callInfoKey{}, &callInfo{addr: addr})))
	})
}

// clientAddr is the address of ctx's caller; "" when the call did not come
// over HTTP.
func clientAddr(ctx context.Context) string {
	if c := callInfoOf(ctx); c != nil {
		return c.addr
	}
	return ""
}

// forwardClient names ctx's caller on the headers of a forwarded call.
func forwardClient(ctx context.Context, h http.Header) {
	if addr := clientAddr(ctx); addr != "" {
		h.Set(forwardedClientHeader, addr)
	}
}

// clientLeases counts, per client address, the current leases this node
// granted to callers from it.
type clientLeases struct {
	mu     sync.Mutex
	byKey  map[string]grantedTo // key to the lease granted and to whom
	byAddr map[string]int
}

type grantedTo struct{ id, addr string }

func newClientLeases() *clientLeases {
	return &clientLeases{byKey: make(map[string]grantedTo), byAddr: make(map[string]int)}
}

// count returns how many current leases addr holds.
func (c *clientLeases) count(addr string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byAddr[addr]
}

// add records that addr was granted lease id of key, unless it already
// ended in f. Nothing holds f's lock while it runs.
func (c *clientLeases) add(addr, key, id string, f *fsm) {
	if addr == "" {
		return
	}
	c.mu.Lock()
	if prev, ok := c.byKey[key]; ok {
		c.dropLocked(key, prev)
	}
	c.byKey[key] = grantedTo{id: id, addr: addr}
	c.byAddr[addr]++
	c.mu.Unlock()
	// The lease may have ended before it was recorded, and ended would
	// then have found nothing to drop.
	var current bool
	f.read(func(st *lease.State) { _, err := st.Current(key, id); current = err == nil })
	if !current {
		c.ended(key, id)
	}
}

// ended drops lease id of key, if recorded. Applied transitions call it.
func (c *clientLeases) ended(key, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if g, ok := c.byKey[key]; ok && g.id == id {
		c.dropLocked(key, g)
	}
}

func (c *clientLeases) dropLocked(key string, g grantedTo) {
	delete(c.byKey, key)
	if c.byAddr[g.addr]--; c.byAddr[g.addr] <= 0 {
		delete(c.byAddr, g.addr)
	}
}

// reset forgets every lease: the state was replaced wholesale.
func (c *clientLeases) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.byKey)
	clear(c.byAddr)
}

// checkClientLeases refuses an acquisition by a caller from addr once addr
// holds MaxLeasesPerClient leases.
func (s *Server) checkClientLeases(addr string) error {
	if addr == "" {
		return nil
	}
	if n := s.clientLeases.count(addr); n >= s.cfg.MaxLeasesPerClient {
		return &quotaError{Quota: "max-leases-per-client", Of: "client address", Owner: addr, Used: n, Limit: s.cfg.MaxLeasesPerClient}
	}
	return nil
}

// refusalLog logs refused connections at most once every refusalLogEvery,
// with the number refused since the last record: a client that keeps
// connecting beyond its limit must not flood the log.
type refusalLog struct {
	mu      sync.Mutex
	last    time.Time
	skipped int
}

const refusalLogEvery = 10 * time.Second

func (r *refusalLog) log(log *slog.Logger, addr string, limit int) {
	r.mu.Lock()
	now := time.Now()
	if now.Sub(r.last) < refusalLogEvery {
		r.skipped++
		r.mu.Unlock()
		return
	}
	skipped := r.skipped
	r.last, r.skipped = now, 0
	r.mu.Unlock()
	log.Warn("connection refused: too many open from its address", "limit", "max-conns-per-client",
		"client", addr, "max", limit, "refused_since_last_record", skipped)
}
