package server

import (
	"container/list"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/lease"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
)

// Stale rejections reported by resources (RejectionService). They are
// diagnostics: kept in the memory of the node that records them (the
// leader), never in the log, and bounded: the newest maxRejectionEntries
// entries (one per scope, resource and presented token), counts for the
// maxRejectionScopes scopes and maxRejectionResources resources rejected most
// recently. A new leader starts from nothing.
const (
	maxRejectionEntries   = 1000
	maxRejectionScopes    = 10_000
	maxRejectionResources = 1000
	// MaxResourceBytes bounds the name a reporter gives its resource.
	MaxResourceBytes = 128
	// maxReportEntries bounds the entries of one ReportRejections call.
	maxReportEntries     = 1000
	defaultRejectionList = 100
	// maxResourceLabels bounds the resource label of
	// fenced_stale_rejections_by_resource_total: the first resources seen
	// get a series each, later ones share resource="other".
	maxResourceLabels = 32
)

type rejectionKey struct {
	scope, resource string
	presented       uint64
}

// rejectionBook aggregates reported rejections. Safe for concurrent use.
type rejectionBook struct {
	mu        sync.Mutex
	entries   map[rejectionKey]*list.Element // of *fencedv1.Rejection
	order     *list.List                     // least recently rejected first
	scopes    *lruCounts
	resources *lruCounts
	total     uint64

	rejections prometheus.Counter
	unresolved prometheus.Counter
	reports    *prometheus.CounterVec
	byResource *prometheus.CounterVec
	labelled   map[string]bool // resources with a series of their own
}

func newRejectionBook(reg prometheus.Registerer) (*rejectionBook, error) {
	b := &rejectionBook{
		entries: make(map[rejectionKey]*list.Element), order: list.New(),
		scopes: newLRUCounts(maxRejectionScopes), resources: newLRUCounts(maxRejectionResources),
		rejections: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fenced_stale_rejections_total",
			Help: "Stale rejections reported by resources and recorded by this node.",
		}),
		unresolved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fenced_stale_rejections_unresolved_total",
			Help: "Recorded stale rejections whose presented token is beyond this node's memory of grants.",
		}),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenced_rejection_reports_total",
			Help: "ReportRejections calls served by this node, by result (recorded, invalid, denied).",
		}, []string{"result"}),
		byResource: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenced_stale_rejections_by_resource_total",
			Help: "Recorded stale rejections by reporting resource; the first 32 resources seen have a series each, later ones count as \"other\".",
		}, []string{"resource"}),
		labelled: make(map[string]bool),
	}
	for _, c := range []prometheus.Collector{b.rejections, b.unresolved, b.reports, b.byResource} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// initRejections sets up the grant memory (fed by applied) and the
// rejection book. Called by New before raft replays the log.
func (s *Server) initRejections() error {
	s.grants = newGrantMemory(grantsPerKey, maxGrantKeys)
	s.relay = &rejectionRelay{s: s}
	var err error
	s.rejections, err = newRejectionBook(s.cfg.Registerer)
	return err
}

// validateReport checks every entry; nothing is recorded unless all pass.
func validateReport(rs []*fencedv1.StaleRejection) error {
	if len(rs) > maxReportEntries {
		return invalidf("%d rejections in one report, the limit is %d", len(rs), maxReportEntries)
	}
	for i, r := range rs {
		if err := validateRejection(r); err != nil {
			return fmt.Errorf("rejection %d: %w", i, err)
		}
	}
	return nil
}

func validateRejection(r *fencedv1.StaleRejection) error {
	if err := validateKey(r.GetScope()); err != nil {
		return err
	}
	if r.GetPresentedToken() == 0 || r.GetHighestToken() <= r.GetPresentedToken() {
		return invalidf("presented token %d is not below highest token %d: not a stale rejection",
			r.GetPresentedToken(), r.GetHighestToken())
	}
	if err := validateOwner(r.GetOwner()); err != nil {
		return err
	}
	if len(r.GetResource()) > MaxResourceBytes {
		return invalidf("resource is %d bytes, the limit is %d", len(r.GetResource()), MaxResourceBytes)
	}
	return validateText("resource", r.GetResource())
}

// add records n rejections of r, resolved by resolve, at now, and returns a
// copy of the entry as it stands.
func (b *rejectionBook) add(r *fencedv1.StaleRejection, now time.Time, resolve func(key string, token uint64) (grant, bool)) *fencedv1.Rejection {
	n := uint64(max(r.GetCount(), 1))
	k := rejectionKey{scope: r.GetScope(), resource: r.GetResource(), presented: r.GetPresentedToken()}
	// Resolved outside b.mu: the grant memory has a lock of its own.
	presented, okP := resolve(k.scope, k.presented)
	highest, okH := resolve(k.scope, r.GetHighestToken())
	b.rejections.Add(float64(n))
	if !okP {
		b.unresolved.Add(float64(n))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.resourceSeries(k.resource).Add(float64(n))
	b.total += n
	el, ok := b.entries[k]
	if !ok {
		if b.order.Len() >= maxRejectionEntries {
			oldest := b.order.Front()
			e := oldest.Value.(*fencedv1.Rejection)
			delete(b.entries, rejectionKey{e.Scope, e.Resource, e.PresentedToken})
			b.order.Remove(oldest)
		}
		el = b.order.PushBack(&fencedv1.Rejection{Scope: k.scope, Resource: k.resource,
			PresentedToken: k.presented, FirstUnixMs: now.UnixMilli()})
		b.entries[k] = el
	} else {
		b.order.MoveToBack(el)
	}
	e := el.Value.(*fencedv1.Rejection)
	e.Count += n
	e.LastUnixMs = now.UnixMilli()
	e.ScopeCount = b.scopes.add(k.scope, n)
	e.ResourceCount = b.resources.add(k.resource, n)
	if r.GetOwner() != "" {
		e.ReportedOwner = r.GetOwner()
	}
	e.PresentedOwner = e.ReportedOwner
	if okP {
		e.PresentedOwner, e.PresentedGrantedUnixMs = presented.owner, unixMs(presented.at)
	}
	if r.GetHighestToken() >= e.HighestToken {
		e.HighestToken, e.HighestOwner, e.HighestGrantedUnixMs = r.GetHighestToken(), "", 0
		if okH {
			e.HighestOwner, e.HighestGrantedUnixMs = highest.owner, unixMs(highest.at)
		}
	}
	return proto.Clone(e).(*fencedv1.Rejection)
}

// resourceSeries returns the counter of resource: its own while fewer than
// maxResourceLabels resources have one, else the shared "other". Called
// with b.mu held.
func (b *rejectionBook) resourceSeries(resource string) prometheus.Counter {
	if !b.labelled[resource] && len(b.labelled) >= maxResourceLabels {
		return b.byResource.WithLabelValues("other")
	}
	b.labelled[resource] = true
	return b.byResource.WithLabelValues(resource)
}

func unixMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// list returns up to limit entries under prefix that keep passes, newest
// first, and the total recorded.
func (b *rejectionBook) list(prefix string, limit int, keep func(scope string) bool) ([]*fencedv1.Rejection, uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []*fencedv1.Rejection
	for el := b.order.Back(); el != nil && len(out) < limit; el = el.Prev() {
		e := el.Value.(*fencedv1.Rejection)
		if strings.HasPrefix(e.Scope, prefix) && keep(e.Scope) {
			c := proto.Clone(e).(*fencedv1.Rejection)
			// The counts as they are now, not as at the entry's last report.
			c.ScopeCount, c.ResourceCount = b.scopes.get(e.Scope), b.resources.get(e.Resource)
			out = append(out, c)
		}
	}
	return out, b.total
}

// lruCounts counts by name, forgetting the least recently counted name
// beyond max.
type lruCounts struct {
	max   int
	names map[string]*list.Element // of *namedCount
	order *list.List
}

type namedCount struct {
	name string
	n    uint64
}

func newLRUCounts(max int) *lruCounts {
	return &lruCounts{max: max, names: make(map[string]*list.Element), order: list.New()}
}

// get returns the count of name, 0 when forgotten.
func (c *lruCounts) get(name string) uint64 {
	if el, ok := c.names[name]; ok {
		return el.Value.(*namedCount).n
	}
	return 0
}

// add counts n more of name and returns its count.
func (c *lruCounts) add(name string, n uint64) uint64 {
	el, ok := c.names[name]
	if !ok {
		if c.order.Len() >= c.max {
			oldest := c.order.Front()
			delete(c.names, oldest.Value.(*namedCount).name)
			c.order.Remove(oldest)
		}
		el = c.order.PushBack(&namedCount{name: name})
		c.names[name] = el
	} else {
		c.order.MoveToBack(el)
	}
	nc := el.Value.(*namedCount)
	nc.n += n
	return nc.n
}

// recordRejections records a validated report: resolves the tokens, counts,
// logs one record per entry and publishes REJECTED events. It returns the
// number of rejections recorded.
func (s *Server) recordRejections(ctx context.Context, rs []*fencedv1.StaleRejection) uint64 {
	now := time.Now()
	var total uint64
	for _, r := range rs {
		e := s.rejections.add(r, now, s.resolveGrant)
		total += uint64(max(r.GetCount(), 1))
		s.log.LogAttrs(ctx, slog.LevelWarn, "stale fencing token rejected by a resource",
			slog.String("scope", e.Scope),
			slog.Uint64("presented_token", e.PresentedToken),
			slog.Uint64("highest_token", e.HighestToken),
			slog.String("owner", e.PresentedOwner),
			slog.Uint64("token", e.PresentedToken),
			slog.Uint64("rejections", e.Count),
			slog.String("highest_owner", e.HighestOwner),
			slog.String("resource", e.Resource),
			slog.String("reported_owner", e.ReportedOwner))
		s.hub.PublishRejection(rejectedEvent(e, 0))
	}
	return total
}

// resolveGrant finds the grant of token for key: in the grant memory, or
// the current lease when it is that token's.
func (s *Server) resolveGrant(key string, token uint64) (grant, bool) {
	if g, ok := s.grants.lookup(key, token); ok {
		return g, true
	}
	if l, ok := s.currentOf(key); ok && l.Token == token {
		return grant{token: token, owner: l.Owner}, true
	}
	return grant{}, false
}

// rejectedEvent is the Watch event of a recorded rejection: the refused
// epoch as its lease, and the rejection.
func rejectedEvent(e *fencedv1.Rejection, revision uint64) *fencedv1.Event {
	return &fencedv1.Event{Type: fencedv1.Event_REJECTED, Revision: revision, Rejection: e,
		Lease: wireLease(lease.Lease{Key: e.Scope, Owner: e.PresentedOwner, Token: e.PresentedToken}, 0, publicView)}
}
