package server

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/fencedio/fenced/internal/failpoint"
	"github.com/fencedio/fenced/internal/gen/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/lease"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Server is one fenced node: the lease state machine replicated by raft,
// the leader's expiry and wait queues, and the HTTP API.
type Server struct {
	cfg   Config
	log   *slog.Logger
	fsm   *fsm
	raft  *raft.Raft
	store *diskStore
	// raftLogs is the log store raft was given: the WAL behind its wrappers.
	raftLogs raft.LogStore
	trans    *contactTransport
	peers    *peerMux   // the peer port: raft and forwarded calls
	forward  *forwarder // clients of the leader's API
	peerAPI  *http.Server
	expirer  *expirer
	leader   *leaderCheck
	waiters  *waitQueues
	hub      *hub
	expired  recentlyExpired
	// replayedTo is the last log index written before this process started.
	replayedTo uint64
	counts     transitions
	metrics    *metrics
	sec        *security // TLS and auth files, reloadable

	// notify carries raft's leadership changes to watchLeadership.
	notify <-chan bool
	// ready is true while this node is the leader and has applied every
	// entry of earlier terms, so its state and deadlines are current.
	ready    atomic.Bool
	everLed  atomic.Bool // has served as leader; only the DeposedLeaderRenews mutant reads it
	leaderMu sync.Mutex  // orders changes of ready with leadership changes
	// leading ends when this node stops leading (nil while it does not
	// lead); see whileLeading. Guarded by leaderMu.
	leading    context.Context
	endLeading context.CancelFunc

	done     chan struct{} // closed by Close
	wg       sync.WaitGroup
	closeMu  sync.Mutex
	closed   bool
	closeEnd chan struct{} // closed when the first Close returns
	listener net.Listener
	http     *http.Server

	failMu  sync.Mutex
	failure error // a failed write of the raft log, which stopped the node

	// applyPending counts log writes submitted and not yet answered;
	// applyProgress (unix nanoseconds) is when the apply path last made
	// progress, or when it last became busy. /healthz reports a stall when
	// writes have been pending without progress for ApplyStallTimeout.
	applyPending  atomic.Int64
	applyProgress atomic.Int64
	// watchers and subscribers cap Watch and /v1/events streams.
	watchers, subscribers *streamLimiter
	// snapshotSlots bounds the dashboard snapshots built at once.
	snapshotSlots chan struct{}
	// beforeLeaderReset, if set, runs in becomeLeader just before the
	// deadlines are reset: tests use it to apply entries in that window.
	beforeLeaderReset func()

	// overrides counts leases granted under another owner's name (quota.go).
	overrides ownerOverrides
}

// New opens (or creates) the node's data directory and starts raft. A node
// whose directory holds no raft state bootstraps a cluster of one.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg:     cfg,
		log:     cfg.Logger,
		fsm:     newFSM(cfg.MaxIdleKeys),
		waiters: newWaitQueues(),
		hub:     newHub(cfg.WatchHistory, cfg.WatchBuffer),
		done:    make(chan struct{}),

		snapshotSlots: make(chan struct{}, maxConcurrentSnapshots),
		watchers:      newStreamLimiter("watchers", cfg.MaxWatchers, cfg.MaxWatchersPerClient),
		subscribers:   newStreamLimiter("event subscribers", cfg.MaxEventSubscribers, cfg.MaxEventSubscribersPerClient),

		closeEnd: make(chan struct{}),
	}
	s.expirer = newExpirer(s.expireLeases)
	s.forward = newForwarder(s)
	var err error
	if s.sec, err = newSecurity(&s.cfg); err != nil {
		return nil, err
	}
	if s.metrics, err = newMetrics(cfg.Registerer, s); err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	s.fsm.onEvent = s.applied
	s.fsm.onProgress = func() { s.applyProgress.Store(time.Now().UnixNano()) }
	s.fsm.onRestore = s.restored
	if err := s.startRaft(); err != nil {
		close(s.done)
		s.closeRaft()
		s.wg.Wait()
		return nil, err
	}
	s.wg.Add(3)
	go func() { defer s.wg.Done(); s.hub.run(s.done) }()
	go func() { defer s.wg.Done(); s.expirer.run(s.done) }()
	go func() { defer s.wg.Done(); s.watchLeadership() }()
	return s, nil
}

func (s *Server) startRaft() error {
	if err := os.MkdirAll(s.cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	hlog := hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Warn, Output: s.cfg.RaftLog})
	var err error
	// The store locks the directory first, so nothing below touches a
	// directory another process uses.
	if s.store, err = openDiskStore(s.cfg.DataDir, hlog); err != nil {
		return err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(s.cfg.DataDir, 2, hlog)
	if err != nil {
		return fmt.Errorf("open snapshots: %w", err)
	}
	if s.trans, err = s.newTransport(hlog); err != nil {
		return err
	}

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(s.cfg.NodeID)
	rc.Logger = hlog
	rc.HeartbeatTimeout = s.cfg.HeartbeatTimeout
	rc.ElectionTimeout = s.cfg.HeartbeatTimeout
	rc.LeaderLeaseTimeout = s.cfg.HeartbeatTimeout / 2
	rc.SnapshotThreshold = s.cfg.SnapshotThreshold
	rc.SnapshotInterval = s.cfg.SnapshotInterval
	rc.TrailingLogs = s.cfg.TrailingLogs
	// Group commit: the leader takes every queued apply (up to
	// MaxAppendEntries) into one append to the WAL, one write and one
	// fsync however many entries it holds.
	rc.BatchApplyCh = true
	rc.MaxAppendEntries = 512
	notify := make(chan bool, 16)
	rc.NotifyCh = notify

	var store raft.LogStore = compactedLogStore{s.store}
	if s.cfg.wrapLogStore != nil {
		store = s.cfg.wrapLogStore(store)
	}
	store = failpoint.WrapLogStore(store)
	store = &failStopLogStore{LogStore: &timedLogStore{LogStore: store, fsync: s.metrics.fsync}, onFail: s.logFailed}
	store = monotonicLogStore{store}
	logs, err := raft.NewLogCache(1024, store)
	if err != nil {
		return err
	}
	s.raftLogs = logs
	existing, err := raft.HasExistingState(logs, s.store, snaps)
	if err != nil {
		return fmt.Errorf("read raft state: %w", err)
	}
	// Entries up to here are replayed on start; they were logged and
	// counted when they first happened.
	if s.replayedTo, err = logs.LastIndex(); err != nil {
		return fmt.Errorf("read raft log: %w", err)
	}
	s.raft, err = raft.NewRaft(rc, s.fsm, logs, s.store, snaps, s.trans)
	if err != nil {
		return fmt.Errorf("start raft: %w", err)
	}
	s.notify = notify
	s.leader = &leaderCheck{verify: s.verifyLeader}
	s.servePeerAPI()
	if existing {
		s.noteExistingState()
		return nil
	}
	return s.bootstrap()
}

// logFailed stops the node after a write or fsync of the raft log failed:
// nothing appended since is acknowledged, and Serve and Close return err.
func (s *Server) logFailed(err error) {
	s.failMu.Lock()
	s.failure = err
	s.failMu.Unlock()
	s.ready.Store(false)
	s.log.Error("stopping: the raft log cannot be written", "err", err)
	// Not here: raft calls this from the goroutine Close waits for.
	go s.Close()
}

// failed returns the log write failure that stopped the node, if any.
func (s *Server) failed() error {
	s.failMu.Lock()
	defer s.failMu.Unlock()
	return s.failure
}

// watchLeadership keeps ready and the expirer in step with leadership.
func (s *Server) watchLeadership() {
	stop := func() {}
	defer func() { stop() }()
	for {
		select {
		case <-s.done:
			return
		case leader := <-s.notify:
			s.leaderMu.Lock()
			stop()
			s.ready.Store(false)
			s.expirer.deactivate()
			s.setLeading(leader)
			s.leaderMu.Unlock()
			if !leader {
				s.log.Info("lost leadership")
				continue
			}
			ctx, cancel := context.WithCancel(context.Background())
			stop = cancel
			s.wg.Add(1)
			go func() { defer s.wg.Done(); s.becomeLeader(ctx) }()
		}
	}
}

// becomeLeader waits until every earlier entry is applied, then gives every
// lease a full TTL and starts serving.
//
// A run whose leadership has ended (ctx cancelled) stops without touching
// the deadlines: a newer run may already track leases this one has not
// seen. The check and the reset happen under leaderMu, which the ending of
// leadership takes to cancel ctx, and the reset reads the leases under the
// state machine's lock, so no entry is applied between the read and the
// reset: its event reaches the expirer after the reset, not before (where
// the reset would drop it).
func (s *Server) becomeLeader(ctx context.Context) {
	for ctx.Err() == nil {
		if err := s.raft.Barrier(0).Error(); err != nil {
			s.log.Warn("leader barrier failed", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(s.cfg.HeartbeatTimeout / 4):
				continue
			}
		}
		break
	}
	if ctx.Err() != nil {
		return
	}
	if s.beforeLeaderReset != nil {
		s.beforeLeaderReset()
	}
	// The deadlines set now are this term's: expiries decided on them carry
	// it, and take effect only in an entry of the same term. Should the
	// term already have moved on, they take effect nowhere, and the
	// leadership change that moved it restarts all this.
	term := s.raft.CurrentTerm()
	s.leaderMu.Lock()
	defer s.leaderMu.Unlock()
	if ctx.Err() != nil {
		return
	}
	n := 0
	s.fsm.read(func(st *lease.State) {
		leases := make([]lease.Lease, 0, st.Len())
		st.Each(func(l lease.Lease) bool { leases = append(leases, l); return true })
		s.expirer.reset(leases, s.expirer.now())
		n = len(leases)
	})
	s.expirer.activate(term)
	s.ready.Store(true)
	s.everLed.Store(true)
	s.waiters.freedAll()
	s.log.Info("serving as leader", "leases", n, "term", term)
}

// applied sees every transition, in log order, on every node. Transitions
// replayed from the log on start update the state kept beside the FSM but
// are not logged or counted again.
func (s *Server) applied(ev lease.Event) {
	l := ev.Lease
	replay := ev.Revision <= s.replayedTo
	switch ev.Type {
	case lease.Acquired:
		s.expirer.add(l, s.expirer.now())
		prev, tookOver := s.expired.take(l.Key)
		if replay {
			break
		}
		s.metrics.tokens.Inc()
		s.counts.acquired.Add(1)
		if tookOver {
			s.metrics.takeovers.Inc()
			s.counts.takeovers.Add(1)
			s.log.Info("lease taken over", "scope", l.Key, "owner", l.Owner, "lease_id", idFingerprint(l.ID), "token", l.Token,
				"previous_owner", prev.Owner, "previous_token", prev.Token)
		} else {
			s.log.Info("lease acquired", "scope", l.Key, "owner", l.Owner, "lease_id", idFingerprint(l.ID), "token", l.Token, "ttl", l.TTL)
		}
	case lease.Released:
		s.expirer.remove(l.Key, l.ID)
		s.expired.take(l.Key)
		s.waiters.freed(l.Key)
		if !replay {
			s.counts.released.Add(1)
			if ev.By != "" {
				s.log.Info("lease revoked", "scope", l.Key, "owner", l.Owner, "lease_id", idFingerprint(l.ID), "token", l.Token, "by", ev.By)
			} else {
				s.log.Info("lease released", "scope", l.Key, "owner", l.Owner, "lease_id", idFingerprint(l.ID), "token", l.Token)
			}
		}
	case lease.Expired:
		s.expirer.remove(l.Key, l.ID)
		s.expired.put(l)
		s.waiters.freed(l.Key)
		if !replay {
			s.metrics.expirations.Inc()
			s.counts.expired.Add(1)
			s.log.Info("lease expired", "scope", l.Key, "owner", l.Owner, "lease_id", idFingerprint(l.ID), "token", l.Token)
		}
	}
	s.hub.publish(ev)
}

func (s *Server) restored(st *lease.State) {
	leases := make([]lease.Lease, 0, st.Len())
	st.Each(func(l lease.Lease) bool { leases = append(leases, l); return true })
	s.expirer.reset(leases, s.expirer.now())
	s.hub.restored(st.Applied())
	s.waiters.freedAll()
}

// expireLeases writes the expiry of due, decided by the leader of term, to
// the log and returns once it is applied or has failed. Leases whose key has
// a waiter are handed over to it, each in an entry of its own so that every
// grant has a token of its own; the rest share one entry. If leadership is
// lost meanwhile, the next leader tracks the leases anew.
func (s *Server) expireLeases(term uint64, due []lease.Lease) {
	type handover struct {
		key  string
		w    *waiter
		wait func() (lease.Result, error)
	}
	var (
		handovers []handover
		plain     = make([]lease.Expiry, 0, len(due))
	)
	for _, l := range due {
		e := lease.Expiry{Key: l.Key, ID: l.ID}
		w := s.waiters.claim(l.Key)
		if w == nil {
			plain = append(plain, e)
			continue
		}
		e.NextID, e.Owner, e.TTL = newLeaseID(), w.want.Owner, w.want.TTL
		c := lease.Command{Op: lease.OpExpireBatch, Term: term, Expiries: []lease.Expiry{e}}
		handovers = append(handovers, handover{l.Key, w, s.applyAsync(c)})
	}
	if len(plain) > 0 {
		res, err := s.awaitApply(s.applyAsync(lease.Command{Op: lease.OpExpireBatch, Term: term, Expiries: plain}))
		if err == nil {
			err = res.Err
		}
		if err != nil {
			s.log.Warn("expiry not applied", "leases", len(plain), "term", term, "err", err)
		}
	}
	for _, h := range handovers {
		res, err := s.awaitApply(h.wait)
		if err == nil {
			err = res.Err
		}
		var next lease.Event
		if err == nil && len(res.Items) == 1 {
			next = res.Items[0].Next
		}
		s.waiters.settle(h.key, h.w, next.Lease, next.Type == lease.Acquired)
		if err != nil {
			s.log.Warn("expiry not applied", "scope", h.key, "term", term, "err", err)
		}
	}
}

// awaitApply waits for an apply started by applyAsync, or until the node
// closes: raft never answers an apply still queued in its buffered apply
// channel when it shuts down, and the expirer must not hold Close up. An
// apply abandoned this way may still have been committed; a waiter it was
// handing a key to gets its turn back and, the node closing, an
// unavailable error: an uncertain outcome, as for any write cut by a crash.
func (s *Server) awaitApply(wait func() (lease.Result, error)) (lease.Result, error) {
	type answer struct {
		res lease.Result
		err error
	}
	c := make(chan answer, 1)
	go func() {
		res, err := wait()
		c <- answer{res, err}
	}()
	select {
	case a := <-c:
		return a.res, a.err
	case <-s.done:
		return lease.Result{}, raft.ErrRaftShutdown
	}
}

// applyHandover applies a release c, and hands the key over in the same log
// entry to the first waiter for it, if any.
func (s *Server) applyHandover(c lease.Command, apply func(lease.Command) (lease.Result, error)) (lease.Result, error) {
	w := s.waiters.claim(c.Key)
	if w != nil {
		c.NextID, c.Owner, c.TTL = newLeaseID(), w.want.Owner, w.want.TTL
	}
	res, err := apply(c)
	if w != nil {
		granted := err == nil && res.Next.Type == lease.Acquired
		s.waiters.settle(c.Key, w, res.Next.Lease, granted)
	}
	return res, err
}

// apply writes c to the log and returns its result once applied, which
// implies committed and fsynced.
func (s *Server) apply(c lease.Command) (lease.Result, error) {
	if !s.ready.Load() {
		return lease.Result{}, errNotReady
	}
	return s.applyAlways(c)
}

// applyAlways is apply without the readiness check, for the leader's own
// expiries, which raft refuses anyway if this node no longer leads.
func (s *Server) applyAlways(c lease.Command) (lease.Result, error) {
	return s.applyAsync(c)()
}

// applyAsync writes c to the log without the readiness check and returns a
// function that waits for its result, so that one goroutine can have several
// entries in flight.
func (s *Server) applyAsync(c lease.Command) func() (lease.Result, error) {
	data, err := c.MarshalBinary()
	if err != nil {
		return func() (lease.Result, error) { return lease.Result{}, err }
	}
	start := time.Now()
	if s.applyPending.Add(1) == 1 {
		s.applyProgress.Store(start.UnixNano()) // idle until now: not a stall
	}
	f := s.raft.Apply(data, 0)
	var once sync.Once
	return func() (lease.Result, error) {
		err := f.Error()
		once.Do(func() { s.applyPending.Add(-1) })
		if err != nil {
			return lease.Result{}, err
		}
		s.metrics.apply.Observe(time.Since(start).Seconds())
		return f.Response().(lease.Result), nil
	}
}

func newLeaseID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Handler returns the HTTP handler of the lease API, /healthz and /metrics.
func (s *Server) Handler() http.Handler { return s.handler(false) }

// handler is Handler for the public port (peer false) or for the calls
// other nodes forward over the peer port (peer true). Only the latter
// trusts the principal a forwarding node names (forwardedPrincipalHeader);
// on the public port that header is ignored and callers authenticate
// themselves.
func (s *Server) handler(peer bool) http.Handler {
	mux := http.NewServeMux()
	path, h := fencedv1connect.NewLeaseServiceHandler(s.leaseService(), s.handlerOptions()...)
	mux.Handle(path, explainRefusals(withStreamControl(s.limitRPC(s.authenticate(limitBody(h, s.cfg.MaxBodyBytes), peer)))))
	path, h = fencedv1connect.NewAdminServiceHandler(s.adminService(), s.handlerOptions()...)
	mux.Handle(path, s.limitRPC(s.authenticate(limitBody(h, s.cfg.MaxBodyBytes), peer)))
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /v1/keys", s.serveKeys)
	mux.HandleFunc("GET /v1/role", s.serveRole)
	mux.Handle("GET /v1/backup", s.authenticate(s.requireAdminHTTP(http.HandlerFunc(s.serveBackup)), peer))
	adminPath, adminHandler := fencedv1connect.NewClusterServiceHandler(&admin{s: s},
		append(s.handlerOptions(), connect.WithInterceptors(s.requireAdmin()))...)
	mux.Handle(adminPath, s.authenticate(limitBody(adminHandler, s.cfg.MaxBodyBytes), peer))
	s.registerDashboard(mux)
	if s.cfg.Profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.cfg.Gatherer, promhttp.HandlerOpts{}))
	return s.protectDashboard(mux, peer)
}

// maxConcurrentSnapshots bounds the dashboard snapshots built at once; one
// per core of a small machine keeps the rest of the CPU for the write path.
const maxConcurrentSnapshots = 2

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	if !s.canServe() {
		http.Error(w, "not serving acquisitions: no leader yet, or no contact with it", http.StatusServiceUnavailable)
		return
	}
	if stalled := s.applyStalled(time.Now()); stalled > 0 {
		http.Error(w, fmt.Sprintf("apply path stalled: %d log writes pending, no progress for %v (limit %v)",
			s.applyPending.Load(), stalled.Round(time.Millisecond), s.cfg.ApplyStallTimeout), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

// applyStalled returns how long log writes have been pending without any
// being applied, if that exceeds Config.ApplyStallTimeout, and 0 otherwise.
// A leader that answers heartbeats but cannot apply (a hung disk, a
// saturated FSM) refuses every acquisition; this lets /healthz say so.
func (s *Server) applyStalled(now time.Time) time.Duration {
	if s.applyPending.Load() == 0 {
		return 0
	}
	since := now.Sub(time.Unix(0, s.applyProgress.Load()))
	if since <= s.cfg.ApplyStallTimeout {
		return 0
	}
	return since
}

// Ready reports whether this node serves acquisitions.
func (s *Server) Ready() bool { return s.ready.Load() }

// WaitReady blocks until the node serves acquisitions or ctx ends.
func (s *Server) WaitReady(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !s.ready.Load() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for leadership: %w", ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// Serve listens on Config.Listen and serves until ctx ends or Close is
// called, then shuts down gracefully.
func (s *Server) Serve(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", s.cfg.Listen, err)
	}
	return s.ServeListener(ctx, ln)
}

// ServeListener is Serve on an existing listener.
func (s *Server) ServeListener(ctx context.Context, ln net.Listener) error {
	var served net.Listener = s.limitListener(ln)
	var protocols *http.Protocols
	if s.sec.tls != nil {
		// Only TLS: the buffer sits under it, so that net/http sees the
		// *tls.Conn it negotiates HTTP/2 on and answers plaintext HTTP
		// with 400.
		protocols = new(http.Protocols)
		protocols.SetHTTP1(true)
		protocols.SetHTTP2(true)
		served = tls.NewListener(served, s.sec.tls.ServerConfig())
	}
	s.closeMu.Lock()
	s.listener = ln
	s.http = s.newHTTPServer()
	if protocols != nil {
		s.http.Protocols = protocols
	}
	srv := s.http
	s.closeMu.Unlock()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(served) }()
	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return s.failed()
		}
		return err
	case <-ctx.Done():
		return s.Close()
	case <-s.done:
		return s.failed()
	}
}

// baseContext is cancelled by Close, which ends open Watch streams.
func (s *Server) baseContext() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-s.done; cancel() }()
	return ctx
}

// Addr returns the address the API listens on, once serving.
func (s *Server) Addr() net.Addr {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.listener == nil {
		return nil
	}
	return s.listener.Addr()
}

// Close stops serving, lets in-flight requests finish for up to 5 seconds,
// and shuts raft down. Every acknowledged grant is already on disk. If a
// write of the raft log failed, the node has closed itself and Close returns
// that error (ErrLogWrite).
func (s *Server) Close() error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		<-s.closeEnd // the node closed itself: wait until it is done
		return s.failed()
	}
	defer close(s.closeEnd)
	s.closed = true
	srv := s.http
	s.closeMu.Unlock()
	s.ready.Store(false)
	close(s.done)
	var errs []error
	if srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		errs = append(errs, srv.Shutdown(ctx))
		cancel()
	}
	errs = append(errs, s.closeRaft())
	s.wg.Wait()
	return errors.Join(append(errs, s.failed())...)
}

func (s *Server) closeRaft() error {
	var errs []error
	s.closePeerAPI()
	if s.raft != nil {
		errs = append(errs, s.raft.Shutdown().Error())
	}
	if s.trans != nil {
		errs = append(errs, s.trans.Close())
	}
	if s.store != nil {
		if s.raft != nil && errors.Join(errs...) == nil && s.failed() == nil {
			errs = append(errs, s.store.markClosed())
		}
		errs = append(errs, s.store.Close())
	}
	return errors.Join(errs...)
}
