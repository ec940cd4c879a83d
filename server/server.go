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

	"github.com/fencedio/fenced/internal/gen/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/lease"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Server is one fenced node: the lease state machine replicated by raft,
// the leader's expiry and wait queues, and the HTTP API.
type Server struct {
	cfg     Config
	log     *slog.Logger
	fsm     *fsm
	raft    *raft.Raft
	store   *diskStore
	trans   *raft.NetworkTransport
	expirer *expirer
	leader  *leaderCheck
	waiters *waitQueues
	hub     *hub
	expired recentlyExpired
	// replayedTo is the last log index written before this process started.
	replayedTo uint64
	counts     transitions
	metrics    *metrics
	sec        *security // TLS and auth files, reloadable

	// ready is true while this node is the leader and has applied every
	// entry of earlier terms, so its state and deadlines are current.
	notify <-chan bool

	ready    atomic.Bool
	leaderMu sync.Mutex // orders changes of ready with leadership changes

	done     chan struct{} // closed by Close
	wg       sync.WaitGroup
	closeMu  sync.Mutex
	closed   bool
	closeEnd chan struct{} // closed when the first Close returns
	listener net.Listener
	http     *http.Server

	failMu  sync.Mutex
	failure error // a failed write of the raft log, which stopped the node
}

// New opens (or creates) the node's data directory and starts raft. A node
// whose directory holds no raft state bootstraps a cluster of one.
func New(cfg Config) (*Server, error) {
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

		closeEnd: make(chan struct{}),
	}
	s.expirer = newExpirer(s.expireLeases)
	var err error
	if s.sec, err = newSecurity(&s.cfg); err != nil {
		return nil, err
	}
	if s.metrics, err = newMetrics(cfg.Registerer, s); err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	s.fsm.onEvent = s.applied
	s.fsm.onRestore = s.restored
	if err := s.startRaft(); err != nil {
		s.closeRaft()
		return nil, err
	}
	s.wg.Add(2)
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
	// Peers reach this node at the address it listens on.
	s.trans, err = raft.NewTCPTransportWithLogger(s.cfg.RaftListen, nil, 3, 10*time.Second, hlog)
	if err != nil {
		return fmt.Errorf("raft listen %s: %w", s.cfg.RaftListen, err)
	}

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(s.cfg.NodeID)
	rc.Logger = hlog
	rc.HeartbeatTimeout = s.cfg.HeartbeatTimeout
	rc.ElectionTimeout = s.cfg.HeartbeatTimeout
	rc.LeaderLeaseTimeout = s.cfg.HeartbeatTimeout / 2
	rc.SnapshotThreshold = s.cfg.SnapshotThreshold
	// Raft compares the log with SnapshotThreshold only this often (its
	// default is two minutes); at thousands of entries a second the log
	// grew by hundreds of MB between looks.
	rc.SnapshotInterval = 10 * time.Second
	rc.TrailingLogs = s.cfg.SnapshotThreshold
	// Group commit: the leader takes every queued apply (up to
	// MaxAppendEntries) into one append to the WAL, one write and one
	// fsync however many entries it holds.
	rc.BatchApplyCh = true
	rc.MaxAppendEntries = 512
	notify := make(chan bool, 16)
	rc.NotifyCh = notify

	var store raft.LogStore = s.store
	if s.cfg.wrapLogStore != nil {
		store = s.cfg.wrapLogStore(store)
	}
	store = &failStopLogStore{LogStore: &timedLogStore{LogStore: store, fsync: s.metrics.fsync}, onFail: s.logFailed}
	logs, err := raft.NewLogCache(1024, store)
	if err != nil {
		return err
	}
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
	s.leader = &leaderCheck{verify: func() error { return s.raft.VerifyLeader().Error() }}
	if !existing {
		err := s.raft.BootstrapCluster(raft.Configuration{Servers: []raft.Server{
			{ID: rc.LocalID, Address: s.trans.LocalAddr()},
		}}).Error()
		if err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return fmt.Errorf("bootstrap: %w", err)
		}
	}
	return nil
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
	// The deadlines set now are this term's: expiries decided on them carry
	// it, and take effect only in an entry of the same term. Should the
	// term already have moved on, they take effect nowhere, and the
	// leadership change that moved it restarts all this.
	term := s.raft.CurrentTerm()
	var leases []lease.Lease
	s.fsm.read(func(st *lease.State) {
		leases = make([]lease.Lease, 0, st.Len())
		st.Each(func(l lease.Lease) bool { leases = append(leases, l); return true })
	})
	s.expirer.reset(leases, time.Now())
	s.leaderMu.Lock()
	defer s.leaderMu.Unlock()
	if ctx.Err() != nil {
		return
	}
	s.expirer.activate(term)
	s.ready.Store(true)
	s.waiters.freedAll()
	s.log.Info("serving as leader", "leases", len(leases), "term", term)
}

// applied sees every transition, in log order, on every node. Transitions
// replayed from the log on start update the state kept beside the FSM but
// are not logged or counted again.
func (s *Server) applied(ev lease.Event) {
	l := ev.Lease
	replay := ev.Revision <= s.replayedTo
	switch ev.Type {
	case lease.Acquired:
		s.expirer.add(l, time.Now())
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
	s.expirer.reset(leases, time.Now())
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
		res, err := s.applyAsync(lease.Command{Op: lease.OpExpireBatch, Term: term, Expiries: plain})()
		if err == nil {
			err = res.Err
		}
		if err != nil {
			s.log.Warn("expiry not applied", "leases", len(plain), "term", term, "err", err)
		}
	}
	for _, h := range handovers {
		res, err := h.wait()
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
	f := s.raft.Apply(data, 0)
	return func() (lease.Result, error) {
		if err := f.Error(); err != nil {
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
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	path, h := fencedv1connect.NewLeaseServiceHandler(&service{s: s}, s.handlerOptions()...)
	mux.Handle(path, s.authenticate(limitBody(h, s.cfg.MaxBodyBytes)))
	path, h = fencedv1connect.NewAdminServiceHandler(&adminService{s: s}, s.handlerOptions()...)
	mux.Handle(path, s.authenticate(limitBody(h, s.cfg.MaxBodyBytes)))
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /v1/keys", s.serveKeys)
	s.registerDashboard(mux)
	if s.cfg.Profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.cfg.Gatherer, promhttp.HandlerOpts{}))
	return s.protectDashboard(mux)
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	if !s.ready.Load() {
		http.Error(w, "not serving acquisitions: no leader yet, or not the leader", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
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
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	var served net.Listener = bufferedListener{ln}
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
	s.http = &http.Server{
		Handler:           s.Handler(),
		Protocols:         protocols,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return s.baseContext() },
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
