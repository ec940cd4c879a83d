package rejections

import (
	"container/list"
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
)

// The bounds of the book and of a report.
const (
	// MaxEntries bounds the entries the book keeps, and a list.
	MaxEntries   = 1000
	maxScopes    = 10_000
	maxResources = 1000
	// MaxResourceBytes bounds the name a reporter gives its resource.
	MaxResourceBytes = 128
	// MaxReportEntries bounds the entries of one ReportRejections call.
	MaxReportEntries = 1000
	// defaultList is the length of a list that asks for none.
	defaultList = 100
	// maxResourceLabels bounds the resource label of
	// fenced_stale_rejections_by_resource_total: the first resources seen
	// get a series each, later ones share resource="other".
	maxResourceLabels = 32
)

// Grant is what the node remembers of the grant of a token.
type Grant struct {
	Owner string
	At    time.Time // zero when unknown
}

// Resolve finds the grant of token under scope; false when the node does
// not remember it.
type Resolve func(scope string, token uint64) (Grant, bool)

// Outcome is the result of a ReportRejections call, as counted by
// fenced_rejection_reports_total.
type Outcome string

// The outcomes of a report.
const (
	Recorded Outcome = "recorded"
	Invalid  Outcome = "invalid"
	Denied   Outcome = "denied"
)

type entryKey struct {
	scope, resource string
	presented       uint64
}

// Book aggregates reported rejections. Safe for concurrent use.
type Book struct {
	log *slog.Logger

	mu        sync.Mutex
	entries   map[entryKey]*list.Element // of *fencedv1.Rejection
	order     *list.List                 // least recently rejected first
	scopes    *lruCounts
	resources *lruCounts
	total     uint64

	rejections prometheus.Counter
	unresolved prometheus.Counter
	reports    *prometheus.CounterVec
	byResource *prometheus.CounterVec
	labelled   map[string]bool // resources with a series of their own
}

// NewBook returns an empty book whose metrics are registered with reg and
// which logs each rejection it records to log.
func NewBook(reg prometheus.Registerer, log *slog.Logger) (*Book, error) {
	b := &Book{
		log:     log,
		entries: make(map[entryKey]*list.Element), order: list.New(),
		scopes: newLRUCounts(maxScopes), resources: newLRUCounts(maxResources),
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

// CountReport counts a ReportRejections call served by this node.
func (b *Book) CountReport(o Outcome) { b.reports.WithLabelValues(string(o)).Inc() }

// Record records a validated report: resolves its tokens, counts, logs one
// record per entry and hands each entry as it now stands to publish. It
// returns the number of rejections recorded.
func (b *Book) Record(ctx context.Context, rs []*fencedv1.StaleRejection, resolve Resolve, publish func(*fencedv1.Rejection)) uint64 {
	now := time.Now()
	var total uint64
	for _, r := range rs {
		e := b.add(r, now, resolve)
		total += uint64(max(r.GetCount(), 1))
		b.log.LogAttrs(ctx, slog.LevelWarn, "stale fencing token rejected by a resource",
			slog.String("scope", e.Scope),
			slog.Uint64("presented_token", e.PresentedToken),
			slog.Uint64("highest_token", e.HighestToken),
			slog.String("owner", e.PresentedOwner),
			slog.Uint64("token", e.PresentedToken),
			slog.Uint64("rejections", e.Count),
			slog.String("highest_owner", e.HighestOwner),
			slog.String("resource", e.Resource),
			slog.String("reported_owner", e.ReportedOwner))
		publish(e)
	}
	return total
}

// add records n rejections of r, resolved by resolve, at now, and returns a
// copy of the entry as it stands.
func (b *Book) add(r *fencedv1.StaleRejection, now time.Time, resolve Resolve) *fencedv1.Rejection {
	n := uint64(max(r.GetCount(), 1))
	k := entryKey{scope: r.GetScope(), resource: r.GetResource(), presented: r.GetPresentedToken()}
	// Resolved outside b.mu: the node's memory of grants has a lock of its
	// own.
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
		if b.order.Len() >= MaxEntries {
			oldest := b.order.Front()
			e := oldest.Value.(*fencedv1.Rejection)
			delete(b.entries, entryKey{e.Scope, e.Resource, e.PresentedToken})
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
		e.PresentedOwner, e.PresentedGrantedUnixMs = presented.Owner, unixMs(presented.At)
	}
	if r.GetHighestToken() >= e.HighestToken {
		e.HighestToken, e.HighestOwner, e.HighestGrantedUnixMs = r.GetHighestToken(), "", 0
		if okH {
			e.HighestOwner, e.HighestGrantedUnixMs = highest.Owner, unixMs(highest.At)
		}
	}
	return proto.Clone(e).(*fencedv1.Rejection)
}

// resourceSeries returns the counter of resource: its own while fewer than
// maxResourceLabels resources have one, else the shared "other". Called
// with b.mu held.
func (b *Book) resourceSeries(resource string) prometheus.Counter {
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

// List returns up to limit entries (100 when limit is 0) whose scope has
// prefix, newest first, and the total of rejections recorded.
func (b *Book) List(prefix string, limit int) ([]*fencedv1.Rejection, uint64) {
	if limit == 0 {
		limit = defaultList
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []*fencedv1.Rejection
	for el := b.order.Back(); el != nil && len(out) < limit; el = el.Prev() {
		e := el.Value.(*fencedv1.Rejection)
		if strings.HasPrefix(e.Scope, prefix) {
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
