package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/internal/noreplay"
	"github.com/fencedio/fenced/lease"
)

// ErrNotHeld is returned by Renew and Release when the lease is not the
// current lease of its key: it expired, was released or never existed.
var ErrNotHeld = lease.ErrNotHeld

// ErrHeld is matched by *HeldError.
var ErrHeld = lease.ErrHeld

// HeldError is returned by Acquire when the key is held by someone else.
type HeldError = lease.HeldError

// ErrLost is matched by the cause of a lost lease's context.
var ErrLost = errors.New("lease lost")

// ErrReleased is the cause of a released lease's context.
var ErrReleased = errors.New("lease released")

// ErrClosed is returned by Acquire after Close, and matched by the cause
// of a lease that Close ended.
var ErrClosed = errors.New("client closed")

// Config configures a Client.
type Config struct {
	// Endpoint is the base URL of a fenced node. Default
	// "http://127.0.0.1:7420". Ignored when Endpoints is set.
	Endpoint string
	// Endpoints are the base URLs of a cluster's nodes (any of them serves
	// every call); calls fail over between them (see endpoints.go).
	// Default: Endpoint alone.
	Endpoints []string
	// AutoSyncInterval, when positive, makes the client replace its
	// endpoints every interval with the client URLs the cluster's members
	// advertise (fenced --advertise-client-url; see Sync), as etcd's
	// AutoSyncInterval does: members added and removed then need no change
	// of configuration. Default 0: off, as in etcd; the endpoints stay those
	// given. Close stops it.
	AutoSyncInterval time.Duration
	// ClusterID pins the client to the cluster with this ID (hex, as
	// /v1/role and the Fenced-Cluster-Id header show it): answers of any
	// other cluster are never used (see pin.go). Default: the cluster of
	// the first answer that names one.
	ClusterID string
	// Logger reports what no call's error shows: the first answer of each
	// endpoint that belongs to another cluster. Default slog.Default().
	Logger *slog.Logger
	// FailoverTimeout bounds how long one call keeps going round the
	// endpoints while none can serve it (for example during an election).
	// Default 5s.
	FailoverTimeout time.Duration
	// HTTPClient carries the requests; the Session and KeepAlive streams
	// need it to speak HTTP/2. Default: unary calls over a pool of reused
	// HTTP/1.1 connections, and the Session, Watch and KeepAlive streams
	// over one HTTP/2 connection (h2c without TLS). On loopback a unary call over HTTP/1.1 costs client and
	// server about a third less CPU than over HTTP/2.
	HTTPClient connect.HTTPClient
	// TLS configures the default transports for an https Endpoint
	// (TLSFiles.Config makes one from files). Ignored with HTTPClient,
	// which carries its own. Default: the system's roots, no client
	// certificate.
	TLS *tls.Config
	// Token is a bearer token sent with every request, for servers with
	// authentication on. Prefer TLS with it: without, anyone on the path
	// can read and replay it. Default: none.
	Token string
	// Owner names the holder in leases, for people reading them. Default
	// "hostname/pid".
	Owner string
	// TTL is the default lease TTL. Default 10s.
	TTL time.Duration
	// RenewInterval caps the time between a lease's renewals: a lease
	// renews every min(its TTL/3, RenewInterval), jittered by up to 10%,
	// so a shorter value buys more retries before the local deadline and a
	// longer one changes nothing. Default (zero): TTL/3 of each lease's own
	// TTL, WithTTL included. Must be below TTL.
	RenewInterval time.Duration
	// RequestTimeout bounds each renewal and release request, and the
	// probe of a new Session stream. Default 2s.
	RequestTimeout time.Duration
	// DisableSession sends Acquire, Renew and Release as unary calls
	// instead of over a Session stream per endpoint (see session.go).
	// Default false: calls go over the stream wherever the server and the
	// HTTP client carry it (HTTP/2), and as unary calls elsewhere.
	DisableSession bool

	// ClockDrift bounds how much slower this process's monotonic clock may
	// run than the server's, as a fraction of elapsed time. A lease's local
	// deadline is the send time of its last successful renewal plus
	// TTL×(1−ClockDrift) − DeadlineMargin, so it passes before the server's
	// deadline as long as the rates differ by less than that.
	//
	// Default 0.001 (1000 ppm, 10ms of a 10s TTL): the Linux kernel lets
	// an NTP daemon steer a clock's rate by at most 500 ppm, so two clocks
	// slewed in opposite directions differ by at most 1000 ppm; quartz
	// oscillators are off by tens of ppm before correction. Chubby's client
	// keeps its local lease timeout conservative in the same way, and
	// Spanner's TrueTime assumes 200 ppm. Raise it where clocks may be
	// slewed faster (chronyd's maxslewrate allows far more than 500 ppm
	// when it corrects a large offset by slewing). Must be below 0.5.
	ClockDrift float64
	// DeadlineMargin is subtracted from every local deadline on top of
	// ClockDrift. It covers the time between the deadline and the moment
	// the lease's context is cancelled (the timer goroutine must be
	// scheduled), during which Context still looks live. Default 10ms.
	// Must not be negative; the TTL less both margins must exceed TTL/3.
	DeadlineMargin time.Duration
}

// Defaults of Config's margins; see Config.ClockDrift.
const (
	DefaultClockDrift     = 0.001
	DefaultDeadlineMargin = 10 * time.Millisecond
)

// withDefaults returns c with each zero field set to its default and the
// endpoints merged into Endpoints (see normalizeEndpoints), which is a copy.
func (c Config) withDefaults() Config {
	c.Endpoints = append([]string(nil), c.Endpoints...)
	if c.FailoverTimeout == 0 {
		c.FailoverTimeout = 5 * time.Second
	}
	if c.Owner == "" {
		host, _ := os.Hostname()
		c.Owner = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	if c.TTL == 0 {
		c.TTL = 10 * time.Second
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 2 * time.Second
	}
	if c.ClockDrift == 0 {
		c.ClockDrift = DefaultClockDrift
	}
	if c.DeadlineMargin == 0 {
		c.DeadlineMargin = DefaultDeadlineMargin
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.ClusterID = strings.ToLower(c.ClusterID)
	return c
}

// Validate checks the configuration as New would use it, zero fields
// replaced by their defaults. It does not change c.
func (c Config) Validate() error {
	c = c.withDefaults()
	if err := normalizeEndpoints(&c); err != nil {
		return err
	}
	switch {
	case c.TTL < time.Millisecond:
		return fmt.Errorf("client config: TTL %v is below 1ms", c.TTL)
	case c.RenewInterval < 0 || c.RenewInterval >= c.TTL:
		return fmt.Errorf("client config: RenewInterval %v must be positive and below TTL %v", c.RenewInterval, c.TTL)
	case c.RequestTimeout <= 0:
		return fmt.Errorf("client config: RequestTimeout %v must be positive", c.RequestTimeout)
	case c.FailoverTimeout < 0:
		return fmt.Errorf("client config: FailoverTimeout %v is negative", c.FailoverTimeout)
	case !isHex(c.ClusterID):
		return fmt.Errorf("client config: ClusterID %q is not a hex string", c.ClusterID)
	case c.AutoSyncInterval < 0:
		return fmt.Errorf("client config: AutoSyncInterval %v is negative", c.AutoSyncInterval)
	case c.ClockDrift < 0 || c.ClockDrift >= 0.5:
		return fmt.Errorf("client config: ClockDrift %v must be at least 0 and below 0.5", c.ClockDrift)
	case c.DeadlineMargin < 0:
		return fmt.Errorf("client config: DeadlineMargin %v must not be negative", c.DeadlineMargin)
	case c.window(c.TTL) <= c.TTL/3:
		return fmt.Errorf("client config: TTL %v less ClockDrift %v and DeadlineMargin %v leaves %v, not more than TTL/3",
			c.TTL, c.ClockDrift, c.DeadlineMargin, c.window(c.TTL))
	}
	return nil
}

// window is how long after a successful request was sent a lease of the
// given TTL is certainly still held by this client: the TTL less the drift
// margin.
func (c *Config) window(ttl time.Duration) time.Duration {
	return ttl - time.Duration(float64(ttl)*c.ClockDrift) - c.DeadlineMargin
}

// renewInterval is the renewal interval of a lease of the given TTL.
func (c *Config) renewInterval(ttl time.Duration) time.Duration {
	if c.RenewInterval > 0 {
		return min(ttl/3, c.RenewInterval)
	}
	return ttl / 3
}

// Client talks to a fenced node, or to the nodes of a cluster. It is safe
// for concurrent use.
type Client struct {
	cfg         Config
	eps         endpointList
	newEndpoint func(url string) endpoint
	transports  []*http.Transport // the defaults, if used
	renewals    renewals          // the leases' shared renewal stream
	sessions    sessions          // the endpoints' Session streams
	stop        chan struct{}     // closed by Close
	closeOnce   sync.Once
	bg          background // what runs besides the callers' calls; Close waits for it
	// now is time.Now. It reads the clock a renewal's answer is checked
	// against before it moves a lease's deadline (Lease.renew); tests make
	// it jump, as for a process paused between an answer and its processing.
	now func() time.Time
}

// New returns a client. It does not connect until the first request.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if err := normalizeEndpoints(&cfg); err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, now: time.Now}
	c.bg.idle.L = &c.bg.mu
	c.renewals.c = c
	unary, streams := cfg.HTTPClient, cfg.HTTPClient
	if cfg.HTTPClient == nil {
		c.transports = []*http.Transport{newTransport(false), newTransport(true)}
		for _, t := range c.transports {
			cfg.setTLS(t)
		}
		unary = &http.Client{Transport: inMemoryBodies{c.transports[0]}}
		streams = &http.Client{Transport: noreplay.Transport{Next: wholeMessages{c.transports[1]}}}
	}
	opts := append(cfg.credentials(), connect.WithInterceptors(cutIsUnavailable{}))
	pin := &c.eps.pin
	pin.log = cfg.Logger
	if cfg.ClusterID != "" {
		pin.id.Store(&cfg.ClusterID)
	}
	c.newEndpoint = func(url string) endpoint {
		u, st := pinnedClient{unary, url, pin}, pinnedClient{streams, url, pin}
		ep := endpoint{url: url,
			rpc:        fencedv1connect.NewLeaseServiceClient(u, url, opts...),
			streams:    fencedv1connect.NewLeaseServiceClient(st, url, opts...),
			admin:      fencedv1connect.NewAdminServiceClient(u, url, opts...),
			rejections: fencedv1connect.NewRejectionServiceClient(u, url, opts...)}
		if !cfg.DisableSession {
			ep.session = &session{c: c, rpc: ep.streams}
			c.sessions.add(ep.session)
		}
		return ep
	}
	eps := make([]endpoint, len(cfg.Endpoints))
	for i, url := range cfg.Endpoints {
		eps[i] = c.newEndpoint(url)
	}
	c.eps.eps.Store(&eps)
	c.eps.timeout = cfg.FailoverTimeout
	c.eps.roleClient = unary
	c.eps.bg = &c.bg
	c.eps.moved = c.leaveSessions
	c.stop = make(chan struct{})
	if cfg.AutoSyncInterval > 0 {
		c.bg.goFn(func() { c.autoSync(cfg.AutoSyncInterval) })
	}
	return c, nil
}

// CloseIdleConnections closes the Session streams that carry no call and
// the default transports' connections that carry no request; later calls
// open new ones. Connections of Config.HTTPClient are left to it.
func (c *Client) CloseIdleConnections() {
	c.sessions.closeIdle()
	for _, t := range c.transports {
		t.CloseIdleConnections()
	}
}

// Info describes a lease as the server reported it.
type Info struct {
	Key string
	// ID renews and releases the lease, so the server gives it only to the
	// holder: it is set in what Acquire, Renew and KeepAlive return, and
	// empty in what Get, List and Watch return.
	ID    string
	Owner string
	Token uint64
	TTL   time.Duration
	// Remaining is the time left before expiry as the server saw it when it
	// answered.
	Remaining time.Duration
	// Signature is the server's signature of Token for Key, with token
	// signing on (Acquire and Renew only); send it in
	// Fencing-Token-Signature.
	Signature string
}

func infoFromProto(p *fencedv1.Lease) Info {
	return Info{Key: p.GetKey(), ID: p.GetLeaseId(), Owner: p.GetOwner(), Token: p.GetToken(),
		TTL: time.Duration(p.GetTtlMs()) * time.Millisecond, Remaining: time.Duration(p.GetRemainingMs()) * time.Millisecond}
}

type acquireOptions struct {
	ttl, wait time.Duration
	owner     string
}

// AcquireOption changes one acquisition.
type AcquireOption func(*acquireOptions)

// WithTTL sets the lease's TTL instead of Config.TTL. The renewal interval
// scales with it: TTL/3, or Config.RenewInterval if that is set and
// shorter.
func WithTTL(d time.Duration) AcquireOption { return func(o *acquireOptions) { o.ttl = d } }

// WithWait waits up to d, first come first served, for a held key.
func WithWait(d time.Duration) AcquireOption { return func(o *acquireOptions) { o.wait = d } }

// WithOwner sets the owner instead of Config.Owner.
func WithOwner(owner string) AcquireOption { return func(o *acquireOptions) { o.owner = owner } }

// Acquire acquires key and keeps the lease renewed until it is released or
// lost. A held key returns a *HeldError (ErrHeld) once the wait, if any
// ([WithWait]), ends. When ctx ends first the error matches ctx.Err(), never
// ErrHeld, and the key may have been granted all the same: that lease
// expires after its TTL. With several endpoints an *UncertainError
// (ErrAcquireUncertain) means an unanswered attempt may hold the key until
// its TTL runs out. How the deadline of a late grant is kept is in
// docs/client-algorithm.md, section 4.
func (c *Client) Acquire(ctx context.Context, key string, opts ...AcquireOption) (*Lease, error) {
	if c.bg.closing() {
		return nil, fmt.Errorf("acquire %q: %w", key, ErrClosed)
	}
	start := time.Now()
	o := acquireOptions{ttl: c.cfg.TTL, owner: c.cfg.Owner}
	for _, opt := range opts {
		opt(&o)
	}
	sent := time.Now()
	var (
		resp       *fencedv1.AcquireResponse
		unanswered error // the first failed attempt that may have been granted
	)
	// An attempt that got no answer may have been granted before the node
	// died or stopped leading; if a retry at the next node then finds the key
	// held by this owner, the holder is most likely that grant, whose lease
	// ID never came back (uncertain).
	err := c.eps.do(ctx, func(ep endpoint) (err error) {
		// The local deadline counts from the attempt that was answered.
		sent = time.Now()
		resp, err = c.acquireAt(ctx, ep, &fencedv1.AcquireRequest{
			Key: key, Owner: o.owner, TtlMs: o.ttl.Milliseconds(), WaitMs: max(o.wait-time.Since(start), 0).Milliseconds(),
		})
		if err != nil && unanswered == nil && retryable(err) && mayHaveArrived(err) {
			unanswered = err
		}
		return err
	})
	if err != nil {
		err = uncertain(fromRPC(err), o.owner, unanswered)
		if cerr := ctx.Err(); cerr != nil && errors.Is(err, ErrHeld) {
			// The answer "held" raced the caller's own deadline: report the
			// deadline, as the server does when it sees it first.
			err = fmt.Errorf("%w (the key was still held: %v)", cerr, err)
		}
		return nil, fmt.Errorf("acquire %q: %w", key, err)
	}
	info := infoFromProto(resp.GetLease())
	info.Signature = resp.GetTokenSignature()
	interval, window := c.cfg.renewInterval(info.TTL), c.cfg.window(info.TTL)
	l := newLease(c, info, interval, window)
	if !c.bg.hold(l) {
		// Close came while the grant was on its way.
		l.halt()
		l.cancel(fmt.Errorf("%w: %w", ErrLost, ErrClosed))
		l.releaseLost()
		return nil, fmt.Errorf("acquire %q: %w", key, ErrClosed)
	}
	if window <= interval {
		// A TTL this short leaves no time to renew before the local
		// deadline (the server refuses such TTLs unless configured to
		// accept them).
		l.lose(fmt.Errorf("%w: TTL %v too short for the deadline margin", ErrInvalid, info.TTL))
		return nil, fmt.Errorf("acquire %q: %w", key, l.Err())
	}
	// The local deadline counts from when the answered attempt was sent: the
	// server may have granted it at any moment after. A grant that comes
	// back late (after waiting in line for longer than a TTL) would leave
	// the first renewal less than half the usual time for retries before
	// that deadline, or none: renew once now and count from that renewal.
	if late := time.Since(sent); late > (window-interval)/2 {
		s, err := l.renewOnce(ctx)
		if err != nil {
			l.lose(fmt.Errorf("renewal after a grant that took %v: %w", late, err))
			return nil, fmt.Errorf("acquire %q: %w", key, l.Err())
		}
		sent = s
	}
	l.start(sent)
	return l, nil
}

// Renew renews lease id of key once, for callers that manage renewal
// themselves (fencectl renew). Leases from Acquire renew on their own.
func (c *Client) Renew(ctx context.Context, key, id string) (Info, error) {
	return c.renewBy(ctx, key, id, true)
}

// renewBy is Renew, over the Session stream only if session is set.
func (c *Client) renewBy(ctx context.Context, key, id string, session bool) (Info, error) {
	var resp *fencedv1.RenewResponse
	err := c.eps.do(ctx, func(ep endpoint) (err error) {
		req := &fencedv1.RenewRequest{Key: key, LeaseId: id}
		if session {
			resp, err = c.renewAt(ctx, ep, req)
			return err
		}
		r, err := ep.rpc.Renew(ctx, connect.NewRequest(req))
		if err == nil {
			resp = r.Msg
		}
		return err
	})
	if err != nil {
		return Info{}, fmt.Errorf("renew %q: %w", key, fromRPC(err))
	}
	info := infoFromProto(resp.GetLease())
	info.Signature = resp.GetTokenSignature()
	return info, nil
}

// Release releases lease id of key, for callers that hold only the ID.
// ErrNotHeld means a node answered that the lease had already ended, and
// no earlier attempt of this call can have ended it. With several
// endpoints, an attempt that went unanswered (the node died, or stopped
// leading, after applying it) is sent to the next node; if that retry
// finds the lease gone, Release returns nil: the lease was released by the
// unanswered attempt or expired, and is gone either way (see releaseGone).
func (c *Client) Release(ctx context.Context, key, id string) error {
	var unanswered error // the first failed attempt that may have been applied
	err := c.eps.do(ctx, func(ep endpoint) error {
		err := c.releaseAt(ctx, ep, &fencedv1.ReleaseRequest{Key: key, LeaseId: id})
		if err != nil && unanswered == nil && retryable(err) && mayHaveArrived(err) {
			unanswered = err
		}
		return err
	})
	if err == nil {
		return nil
	}
	if err = fromRPC(err); releaseGone(err, unanswered) {
		return nil
	}
	return fmt.Errorf("release %q: %w", key, err)
}

// GetResult is what Get found for a key.
type GetResult struct {
	// Lease is the key's current lease; nil when the key is free.
	Lease *Info
	// LastToken is the last token issued for the key, held or not (0 when
	// none ever was): the token a guard may still see from a holder that
	// lost the key.
	LastToken uint64
}

// Get returns the current lease of key, if any, and the last token issued
// for it.
func (c *Client) Get(ctx context.Context, key string) (*GetResult, error) {
	var resp *connect.Response[fencedv1.GetResponse]
	err := c.eps.do(ctx, func(ep endpoint) (err error) {
		resp, err = ep.rpc.Get(ctx, connect.NewRequest(&fencedv1.GetRequest{Key: key}))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get %q: %w", key, fromRPC(err))
	}
	r := &GetResult{LastToken: resp.Msg.GetLastToken()}
	if l := resp.Msg.GetLease(); l != nil {
		info := infoFromProto(l)
		r.Lease = &info
	}
	return r, nil
}

// List returns up to limit current leases under prefix, sorted by key
// (limit 0: the server's default).
func (c *Client) List(ctx context.Context, prefix string, limit int) ([]Info, error) {
	leases, _, err := c.ListRevision(ctx, prefix, limit)
	return leases, err
}

// ErrInvalid is matched by errors for requests the server refused as bad
// input.
var ErrInvalid = errors.New("invalid request")

// ErrUnavailable is matched by errors for requests the server could not
// serve now (no leader, shutting down); they may succeed on retry.
var ErrUnavailable = errors.New("service unavailable")

// fromRPC turns Connect errors into the package's errors. A refusal of a
// held key becomes a *HeldError describing the holder; the other mapped
// codes keep the *connect.Error in the chain beside the sentinel, so its
// code and metadata stay readable with errors.As.
func fromRPC(err error) error {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err
	}
	switch ce.Code() {
	case connect.CodeFailedPrecondition:
		for _, d := range ce.Details() {
			if m, derr := d.Value(); derr == nil {
				if h, ok := m.(*fencedv1.LeaseHeld); ok {
					return &HeldError{Key: h.GetKey(), Owner: h.GetOwner(), Token: h.GetToken(),
						Remaining: time.Duration(h.GetRemainingMs()) * time.Millisecond}
				}
			}
		}
	case connect.CodeNotFound:
		return fmt.Errorf("%w: %w", ErrNotHeld, ce)
	case connect.CodeInvalidArgument:
		return fmt.Errorf("%w: %w", ErrInvalid, ce)
	case connect.CodeUnavailable:
		return fmt.Errorf("%w: %w", ErrUnavailable, ce)
	case connect.CodeUnauthenticated:
		return fmt.Errorf("%w: %w", ErrUnauthenticated, ce)
	case connect.CodePermissionDenied:
		return fmt.Errorf("%w: %w", ErrPermissionDenied, ce)
	case connect.CodeDeadlineExceeded:
		// The server's answer when the caller's deadline, which it was sent,
		// ended first; the same error as the client's own timer gives.
		if !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
		}
	}
	return err
}
