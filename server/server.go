package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencedio/fenced/internal/failpoint"
	"github.com/fencedio/fenced/internal/failpoint/failstore"
	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/admission"
	"github.com/fencedio/fenced/server/internal/api"
	"github.com/fencedio/fenced/server/internal/apierr"
	"github.com/fencedio/fenced/server/internal/contact"
	"github.com/fencedio/fenced/server/internal/dashboard"
	"github.com/fencedio/fenced/server/internal/expiry"
	"github.com/fencedio/fenced/server/internal/fanout"
	"github.com/fencedio/fenced/server/internal/forward"
	"github.com/fencedio/fenced/server/internal/fsm"
	"github.com/fencedio/fenced/server/internal/leadercheck"
	"github.com/fencedio/fenced/server/internal/logs"
	"github.com/fencedio/fenced/server/internal/nodemetrics"
	"github.com/fencedio/fenced/server/internal/peers"
	"github.com/fencedio/fenced/server/internal/raftlog"
	"github.com/fencedio/fenced/server/internal/rejections"
	"github.com/fencedio/fenced/server/internal/security"
	"github.com/fencedio/fenced/server/internal/sharegate"
	"github.com/fencedio/fenced/server/internal/waiters"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Server is one fenced node: the lease state machine replicated by raft,
// the leader's expiry and wait queues, and the HTTP API.
type Server struct {
	cfg   Config
	log   *slog.Logger
	fsm   *fsm.FSM
	raft  *raft.Raft
	store *raftlog.Store
	// raftLogs is the log store raft was given: the WAL behind its wrappers.
	raftLogs raft.LogStore
	trans    *contact.Transport
	acks     *peers.Acks          // what each peer acknowledged: rolled-back peers are refused
	ident    *peers.IdentityStore // the member's identity in its data directory
	peers    *peers.Mux           // the peer port: raft and forwarded calls
	forward  *forward.Forwarder   // clients of the leader's API
	peerAPI  *http.Server
	expirer  *expiry.Expirer
	leader   *leadercheck.Check
	waiters  *waiters.Queues
	hub      *fanout.Hub
	expired  recentlyExpired
	// replayedTo is the last log index written before this process started.
	replayedTo uint64
	// caughtUp is closed once the state machine has applied that log
	// (catchup.go); streams that start from the state wait for it.
	caughtUp chan struct{}
	// catchUpWait, if set, runs when a stream starts to wait for caughtUp:
	// tests use it to act while it waits.
	catchUpWait func()
	counts      nodemetrics.Transitions
	metrics     *nodemetrics.Metrics
	sec         *security.State      // TLS and auth files, reloadable
	authz       *security.Authorizer // who may do what, under sec's policy

	// notify carries raft's leadership changes to watchLeadership.
	notify <-chan bool
	// readyTerm is the term in which this node leads and has applied every
	// entry of earlier terms, so its state and deadlines are current; 0
	// while it does not serve. A confirmation of leadership counts only
	// while this very term is current.
	readyTerm atomic.Uint64
	everLed   atomic.Bool // has served as leader; only the DeposedLeaderRenews and ReelectedLeaderOldDeadlines mutants read it
	leaderMu  sync.Mutex  // orders changes of readyTerm with leadership changes
	// leading ends when this node stops leading (nil while it does not
	// lead); see whileLeading. Guarded by leaderMu.
	leading    context.Context
	endLeading context.CancelFunc
	// serving is closed once this node serves (readyTerm set) in the
	// leadership leading belongs to; nil while it does not lead. Guarded
	// by leaderMu.
	serving chan struct{}

	// ctx is the node's life and the context of every request: Close ends
	// it with cause apierr.ErrClosed, a node that stops itself with a *stopped
	// cause. wg counts every goroutine the node starts; Close waits for
	// them all. raftDown is closed once raft has shut down: writes raft
	// never answered are given up then (see await).
	ctx       context.Context
	cancel    context.CancelCauseFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
	raftDown  chan struct{}

	// mu guards listener, http and peers.KindAPI, which Serve sets, and orders
	// spawn with the end of ctx.
	mu       sync.Mutex
	listener net.Listener
	http     *http.Server

	// applyPending counts log writes submitted and not yet answered;
	// applyProgress (unix nanoseconds) is when the apply path last made
	// progress, or when it last became busy. /healthz reports a stall when
	// writes have been pending without progress for ApplyStallTimeout.
	applyPending  atomic.Int64
	applyProgress atomic.Int64
	// watchers, sessions and subscribers cap Watch, Session and
	// /v1/events streams.
	watchers, sessions, subscribers *admission.StreamLimiter
	// reads bounds the Gets, Lists and dashboard snapshots answered at
	// once, to half the cores (at least one): more readers wait for a
	// slot, parked, instead of taking every core and the scheduler's queue
	// from the write path; while writes wait, each slot also keeps to
	// ReadShare of the time (internal/sharegate).
	reads *sharegate.Gate
	// fanout bounds the sends to watchers and dashboards in the same way,
	// to FanoutShare of the time of its slots while writes wait: the
	// watchers it cannot serve fall behind and are shed with RESYNC.
	fanout *sharegate.Gate
	// dashboard serves the page, /v1/stats and /v1/events (dashboard.go).
	dashboard *dashboard.Handler
	// beforeLeaderReset, if set, runs in becomeLeader just before the
	// deadlines are reset: tests use it to apply entries in that window.
	beforeLeaderReset func()
	// termOverride, if set, stands for raft's current term where leadership
	// is confirmed: tests use it to move the term under a node that leads.
	termOverride func() uint64

	// grants and rejections: stale rejections reported by resources
	// (rejections.go).
	grants     *rejections.GrantMemory
	rejections *rejections.Book
	relay      *rejections.Relay // the leader's rejections, for this node's watchers

	// overrides counts leases granted under another owner's name (quota.go).
	overrides admission.OwnerOverrides
	// clientLeases counts the leases granted per client address.
	clientLeases *admission.Leases
	// calls admits the unary calls: per client address and network, and
	// in turns by network (limitCalls).
	calls admission.CallLimits
	// refusedConns logs the connections closed by MaxConnsPerClient and
	// its network's share.
	refusedConns admission.RefusalLog
}

// New opens (or creates) the node's data directory and starts raft. A node
// whose directory holds no raft state bootstraps a cluster of one.
func New(cfg Config) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg:     cfg,
		log:     cfg.Logger,
		waiters: waiters.New(newLeaseID),

		clientLeases: admission.NewLeases(admission.Networks{V4: cfg.ClientNetworkV4, V6: cfg.ClientNetworkV6}),
		calls: admission.CallLimits{
			PerClient:  admission.NewCallSlots(cfg.MaxCallsPerClient),
			PerNetwork: admission.NewCallSlots(cfg.MaxCallsPerClient * cfg.NetworkShare),
			Networks:   admission.Networks{V4: cfg.ClientNetworkV4, V6: cfg.ClientNetworkV6},
			Gate:       admission.NewFairGate(cfg.MaxCallsInProgress, nil),
		},
		hub: fanout.NewHub(cfg.WatchHistory, cfg.WatchBuffer, api.EventToProto),

		raftDown: make(chan struct{}),
		caughtUp: make(chan struct{}),
	}
	s.fsm = fsm.New(cfg.MaxIdleKeys, fsm.Hooks{
		Events:      s.appliedBatch,
		Restored:    s.restored,
		Progress:    func() { s.applyProgress.Store(time.Now().UnixNano()) },
		BeforeApply: cfg.beforeApply,
	})
	writing := func() bool { return s.applyPending.Load() > 0 }
	s.reads = sharegate.New(max(1, runtime.GOMAXPROCS(0)/2), cfg.ReadShare, 0, writing)
	s.fanout = sharegate.New(max(1, runtime.GOMAXPROCS(0)/2), cfg.FanoutShare, fanoutHold, writing)
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	s.expirer = expiry.New(s.expireLeases)
	s.forward = newForwarder(s)
	var err error
	if s.sec, err = security.New(security.Files{TLS: cfg.TLS, PeerTLS: cfg.PeerTLS, AuthFile: cfg.AuthFile, SigningKeyFile: cfg.SigningKeyFile}); err != nil {
		return nil, err
	}
	s.authz = s.newAuthorizer()
	if s.metrics, err = nodemetrics.New(cfg.Registerer, nodemetrics.Node{
		Counts: &s.counts,
		Ready:  s.Ready,
		Leases: func() int {
			var n int
			s.fsm.Read(func(st *lease.State) { n = st.Len() })
			return n
		},
		LeaseBytes: func() int64 {
			var n int64
			s.fsm.Read(func(st *lease.State) { n = st.Bytes() })
			return n
		},
		Waiters: func() int { return s.waiters.Len() },
		Calls:   s.calls.Gate.Running,
		Raft:    func() *raft.Raft { return s.raft },
	}); err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	s.watchers = admission.NewStreamLimiter("watchers", "max-watchers", cfg.MaxWatchers, cfg.MaxWatchersPerClient,
		cfg.networkShare(cfg.MaxWatchersPerClient, cfg.MaxWatchers), s.calls.Networks, s.metrics.Refused)
	s.sessions = admission.NewStreamLimiter("sessions", "max-sessions", cfg.MaxSessions, cfg.MaxSessionsPerClient,
		cfg.networkShare(cfg.MaxSessionsPerClient, cfg.MaxSessions), s.calls.Networks, s.metrics.Refused)
	s.subscribers = admission.NewStreamLimiter("event subscribers", "max-event-subscribers", cfg.MaxEventSubscribers, cfg.MaxEventSubscribersPerClient,
		cfg.networkShare(cfg.MaxEventSubscribersPerClient, cfg.MaxEventSubscribers), s.calls.Networks, s.metrics.Refused)
	s.dashboard = s.newDashboard()
	if err := s.initRejections(); err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	if err := s.startRaft(); err != nil {
		s.end(apierr.ErrClosed)
		s.closeRaft()
		s.wg.Wait()
		return nil, err
	}
	s.wg.Add(4)
	go func() { defer s.wg.Done(); s.watchCatchUp() }()
	go func() { defer s.wg.Done(); s.hub.Run(s.ctx.Done()) }()
	go func() { defer s.wg.Done(); s.expirer.Run(s.ctx.Done()) }()
	go func() { defer s.wg.Done(); s.watchLeadership() }()
	return s, nil
}

func (s *Server) startRaft() error {
	if err := os.MkdirAll(s.cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	hlog := logs.NewRaftLogger(s.cfg.RaftLogger, hclog.Warn)
	var err error
	// The store locks the directory first, so nothing below touches a
	// directory another process uses.
	if s.store, err = raftlog.Open(s.cfg.DataDir, hlog); err != nil {
		return err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(s.cfg.DataDir, 2, hlog)
	if err != nil {
		return fmt.Errorf("open snapshots: %w", err)
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

	var store raft.LogStore = raftlog.Compacted{LogStore: s.store}
	if s.cfg.wrapLogStore != nil {
		store = s.cfg.wrapLogStore(store)
	}
	store = failstore.WrapLogStore(store)
	store = &raftlog.FailStop{LogStore: &raftlog.Timed{LogStore: store, Observe: s.metrics.ObserveLogWrite}, OnFail: s.logFailed}
	restored := new(raftlog.RestoredSnapshot)
	store = raftlog.Monotonic{LogStore: store, Restored: restored, Snaps: snaps, Log: hlog}
	logs, err := raft.NewLogCache(1024, store)
	if err != nil {
		return err
	}
	s.raftLogs = logs
	existing, err := raft.HasExistingState(logs, s.store, snaps)
	if err != nil {
		return fmt.Errorf("read raft state: %w", err)
	}
	if s.ident, err = peers.OpenIdentity(s.cfg.DataDir, s.store, existing); err != nil {
		return err
	}
	if s.acks, err = peers.OpenAcks(s.store); err != nil {
		return err
	}
	s.acks.Start(func(err error) { s.log.Error("cannot record what the peers acknowledged", "err", err) })
	if s.trans, err = s.newTransport(hlog); err != nil {
		return err
	}
	// Entries up to here are replayed on start; they were logged and
	// counted when they first happened.
	if s.replayedTo, err = logs.LastIndex(); err != nil {
		return fmt.Errorf("read raft log: %w", err)
	}
	s.raft, err = raft.NewRaft(rc, s.fsm, logs, s.store, raftlog.TrackRestores{SnapshotStore: snaps, Restored: restored}, s.trans)
	if err != nil {
		return fmt.Errorf("start raft: %w", err)
	}
	s.notify = notify
	s.leader = &leadercheck.Check{Verify: s.verifyLeader, Sole: s.soleLeader}
	s.servePeerAPI()
	if existing {
		s.noteExistingState()
		return nil
	}
	return s.bootstrap()
}

// spawn runs f in a goroutine that Close waits for, and returns true; once
// the node's context has ended it runs nothing and returns false.
func (s *Server) spawn(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx.Err() != nil {
		return false
	}
	s.wg.Add(1)
	go func() { defer s.wg.Done(); f() }()
	return true
}

// end ends the node's context with cause; spawn starts nothing after it.
func (s *Server) end(cause error) {
	s.mu.Lock()
	s.cancel(cause)
	s.mu.Unlock()
}

// stopped is the cause that ends the node's context when the node stops
// itself: requests see apierr.ErrClosed, Serve and Close return err.
type stopped struct{ err error }

func (e *stopped) Error() string        { return e.err.Error() }
func (e *stopped) Is(target error) bool { return target == apierr.ErrClosed }
func (e *stopped) Unwrap() error        { return e.err }

// stop stops the node with err, which Serve and Close return.
func (s *Server) stop(err error) {
	s.end(&stopped{err})
	s.log.Error("stopping", "err", err)
	// Not tracked by wg: this goroutine is Close, which waits for wg.
	go s.Close()
}

// logFailed stops the node after a write or fsync of the raft log failed:
// nothing appended since is acknowledged, and Serve and Close return err.
func (s *Server) logFailed(err error) {
	s.end(&stopped{err})
	s.readyTerm.Store(0)
	s.log.Error("stopping: the raft log cannot be written", "err", err)
	// Not here: raft calls this from the goroutine Close waits for. Not
	// tracked by wg: this goroutine is Close.
	go s.Close()
}

// failed returns the error with which the node stopped itself, if any.
func (s *Server) failed() error {
	var st *stopped
	if errors.As(context.Cause(s.ctx), &st) {
		return st.err
	}
	return nil
}

// watchLeadership keeps ready and the expirer in step with leadership.
func (s *Server) watchLeadership() {
	stop := func() {}
	defer func() { stop() }()
	for {
		select {
		case <-s.ctx.Done():
			return
		case leader := <-s.notify:
			s.leaderMu.Lock()
			stop()
			s.readyTerm.Store(0)
			s.expirer.Deactivate()
			s.setLeading(leader)
			s.leaderMu.Unlock()
			if !leader {
				s.log.Info("lost leadership")
				continue
			}
			ctx, cancel := context.WithCancel(context.Background())
			stop = cancel
			s.wg.Add(2)
			go func() { defer s.wg.Done(); s.becomeLeader(ctx) }()
			go func() { defer s.wg.Done(); s.publishClientURLs(ctx) }()
		}
	}
}

// becomeLeader waits until every earlier entry is applied, then gives every
// lease a full TTL and starts serving.
//
// It serves in the term it read before its Barrier, and only if that term
// is still current once the deadlines are about to be reset: a node that
// lost and regained leadership meanwhile may lack the entries of the
// leader in between, so it runs a Barrier again in the new term.
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
		term := s.currentTerm()
		if err := s.raft.Barrier(0).Error(); err != nil {
			s.log.Warn("leader barrier failed", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(s.cfg.HeartbeatTimeout / 4):
			}
			continue
		}
		if s.beforeLeaderReset != nil {
			s.beforeLeaderReset()
		}
		if s.serveTerm(ctx, term) {
			return
		}
	}
}

// serveTerm starts serving as the leader of term, unless ctx ended or term
// is no longer current (false). The deadlines set now are this term's:
// expiries decided on them carry it, and take effect only in an entry of
// the same term.
func (s *Server) serveTerm(ctx context.Context, term uint64) bool {
	s.leaderMu.Lock()
	defer s.leaderMu.Unlock()
	if ctx.Err() != nil {
		return true
	}
	if s.currentTerm() != term {
		return false
	}
	n := 0
	keepOld := failpoint.Enabled(failpoint.NewLeaderNoFreshTTL) ||
		(failpoint.Enabled(failpoint.ReelectedLeaderOldDeadlines) && s.everLed.Load())
	if !keepOld {
		s.fsm.Read(func(st *lease.State) { n = s.resetDeadlines(st) })
	}
	s.expirer.Activate(term)
	s.readyTerm.Store(term)
	s.everLed.Store(true)
	if s.serving != nil {
		close(s.serving)
		s.serving = nil // closed once: a later serveTerm of this leadership finds none
	}
	s.waiters.FreedAll()
	s.log.Info("serving as leader", "leases", n, "term", term)
	return true
}

// confirmTerm returns nil once a leadership confirmation that started after
// the call found this node leading in term, the term it serves in, and
// apierr.ErrNotReady when it serves in none or term is no longer current.
func (s *Server) confirmTerm(ctx context.Context, term uint64) error {
	if term == 0 {
		return apierr.ErrNotReady
	}
	if err := s.leader.Confirm(ctx); err != nil {
		return err
	}
	// The round started after the call, when the term was term or later;
	// terms only grow, so the round confirmed exactly term.
	if s.currentTerm() != term {
		return apierr.ErrNotReady
	}
	return nil
}

// currentTerm is raft's current term (or the tests' termOverride).
func (s *Server) currentTerm() uint64 {
	if s.termOverride != nil {
		return s.termOverride()
	}
	return s.raft.CurrentTerm()
}

// Ready reports whether this node serves acquisitions.
func (s *Server) Ready() bool { return s.readyTerm.Load() != 0 }

// WaitReady blocks until the node serves acquisitions or ctx ends.
func (s *Server) WaitReady(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !s.Ready() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for leadership: %w", ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// Close stops serving, hands the leadership to another voter if this node
// leads a cluster, lets in-flight requests finish for up to 5 seconds, and
// shuts raft down. Every acknowledged grant is already on disk. If a
// write of the raft log failed, the node has closed itself and Close returns
// that error (raftlog.ErrLogWrite).
func (s *Server) Close() error {
	first := false
	var err error
	// A later Close waits here until the first (maybe the node's own) is done.
	s.closeOnce.Do(func() { first, err = true, s.close() })
	if !first {
		return s.failed()
	}
	return err
}

func (s *Server) close() error {
	s.readyTerm.Store(0)
	s.end(apierr.ErrClosed)
	s.mu.Lock()
	srv := s.http
	s.mu.Unlock()
	s.handOverLeadership()
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

// handOverLeadership transfers the leadership of a cluster this node leads
// to another voter before the node drains its requests: otherwise the
// cluster grants nothing until the drain ends and a follower's election
// timeout runs out. It waits at most an election timeout (raft's bound); a
// transfer that fails leaves the election to the followers, as a crash does.
func (s *Server) handOverLeadership() {
	if s.raft == nil || s.raft.State() != raft.Leader {
		return
	}
	f := s.raft.GetConfiguration()
	if f.Error() != nil || !slices.ContainsFunc(f.Configuration().Servers, func(m raft.Server) bool {
		return m.Suffrage == raft.Voter && string(m.ID) != s.cfg.NodeID
	}) {
		return // nobody to hand it to
	}
	if err := s.raft.LeadershipTransfer().Error(); err != nil {
		s.log.Warn("leadership not transferred on shutdown", "err", err)
		return
	}
	s.log.Info("leadership transferred on shutdown")
}

func (s *Server) closeRaft() error {
	var errs []error
	s.closePeerAPI()
	if s.raft != nil {
		errs = append(errs, s.raft.Shutdown().Error())
	}
	close(s.raftDown)
	if s.trans != nil {
		errs = append(errs, s.trans.Close())
	}
	if s.acks != nil {
		errs = append(errs, s.acks.Close())
	}
	if s.store != nil {
		if s.raft != nil && errors.Join(errs...) == nil && s.failed() == nil {
			errs = append(errs, s.store.MarkClosed())
		}
		errs = append(errs, s.store.Close())
	}
	return errors.Join(errs...)
}

// fanoutHold is the longest a send to one watcher or dashboard keeps a
// fan-out slot to itself. A send of a full queue (WatchBuffer events, some
// 100 KiB) to a subscriber that reads takes far less; one that stops
// reading holds its slot this long, not StreamWriteTimeout.
const fanoutHold = 20 * time.Millisecond
