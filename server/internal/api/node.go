package api

import (
	"context"
	"net/http"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/admission"
	"github.com/fencedio/fenced/server/internal/fanout"
	"github.com/fencedio/fenced/server/internal/rejections"
	"github.com/fencedio/fenced/server/internal/security"
	"github.com/fencedio/fenced/server/internal/sharegate"
)

// ForwardedHeader marks a call forwarded by another node.
const ForwardedHeader = "Fenced-Forwarded-By"

// Leases are the node's lease operations, in domain terms: they validate
// their input and write through the log. Errors are the node's domain
// errors (apierr), mapped to Connect codes here.
type Leases interface {
	Acquire(ctx context.Context, key, owner string, ttl, wait time.Duration) (lease.Lease, error)
	// RenewBatch makes the renewals of b that have no error yet, behind
	// one leadership confirmation that starts after the call.
	RenewBatch(ctx context.Context, b []Renewal)
	Release(ctx context.Context, key, id string) error
	Revoke(ctx context.Context, key, by string) (lease.Lease, error)
}

// Renewal is one renewal of a batch: what to renew, then the outcome.
type Renewal struct {
	Key, ID string
	Lease   lease.Lease
	Err     error // set before RenewBatch: not renewed, this is the outcome
}

// Auth authorizes the caller of a context (the principal the node's
// authentication found for it).
type Auth interface {
	// Authorize returns the caller if it may do need on prefix (a key, or
	// a prefix of keys for List and Watch).
	Authorize(ctx context.Context, need security.Permission, prefix string) (security.Principal, error)
	// AuthorizeAcquire checks that the caller may acquire key and returns
	// the owner it may record in place of the owner it asked for.
	AuthorizeAcquire(ctx context.Context, key, owner string) (string, error)
	// AuthorizeRenew checks that the caller may renew or release lease id
	// of key.
	AuthorizeRenew(ctx context.Context, key, id string) error
}

// State reads the lease state this node has applied, whatever its role.
type State interface {
	// Get returns key's current lease if ok, the last token issued for
	// key, and the revision of the state they were read from.
	Get(key string) (l lease.Lease, ok bool, lastToken, revision uint64)
	// List returns up to limit current leases under prefix, the time each
	// has left as this node sees it, and the revision they were read at
	// (the index of the last entry applied).
	List(prefix string, limit int) (leases []lease.Lease, remaining []time.Duration, applied uint64)
	// Remaining is the time key's lease has left as this node sees it.
	Remaining(key string) time.Duration
	// Revision is the revision of the state applied now (at least 1).
	Revision() uint64
}

// Leadership says whether and while this node leads.
type Leadership interface {
	// Ready reports whether this node serves: it leads and its state is
	// current.
	Ready() bool
	// Leading reports whether raft says this node leads, serving or not.
	Leading() bool
	// AwaitServing waits, for a bounded time, until this node, which raft
	// has made leader, serves; at once when it does not lead.
	AwaitServing(ctx context.Context)
	// WhileLeading derives a context that ends with cause
	// apierr.ErrDeposed when this node stops leading.
	WhileLeading(ctx context.Context) (context.Context, func())
	// ConfirmRead confirms that this node still leads, after the read
	// arrived.
	ConfirmRead(ctx context.Context) error
	// EverLed reports whether this node has served as leader (only the
	// DeposedLeaderRenews mutant asks).
	EverLed() bool
}

// Forwarding reaches the leader's API for the calls it serves.
type Forwarding interface {
	// LeaseLeader returns a client of the leader's lease API, or nil if
	// this node leads; with no leader known it waits for one, a while.
	LeaseLeader(ctx context.Context) (fencedv1connect.LeaseServiceClient, error)
	// AdminLeader returns a client of the AdminService of the leader a
	// call with header h goes to, or nil when this node serves it (here,
	// or it leads). A call forwarded once is never forwarded again.
	AdminLeader(ctx context.Context, h http.Header, here bool) (fencedv1connect.AdminServiceClient, error)
	// Forward runs one call to the leader, ended also by a leader change,
	// and returns its error as the caller gets it.
	Forward(ctx context.Context, call func(context.Context) error) error
	// Name names this node and, with auth on, the principal and client
	// address of the caller of ctx on the headers h of a call forwarded
	// to the leader.
	Name(ctx context.Context, h http.Header)
}

// Counts counts the outcomes of writes in the node's metrics.
type Counts interface {
	CountAcquisition(err error)
	CountRenewal(err error)
	CountRelease(err error)
	// ObserveRequest records the latency d of a call of method (Acquire,
	// Renew, Release) that a Session stream carried; unary calls are
	// observed by the node's interceptor.
	ObserveRequest(method string, d time.Duration)
}

// Deps are what the handlers use of the node: the narrow interfaces above,
// which the node implements, and the lower-level parts it owns.
type Deps struct {
	Leases  Leases
	Auth    Auth
	State   State
	Leader  Leadership
	Forward Forwarding
	Counts  Counts

	// Sign returns the signature of token for key, nil with signing off.
	Sign func(key string, token uint64) *string
	// AwaitCatchUp waits until the node has caught up with the log it held
	// at start, and reports false if ctx ends first.
	AwaitCatchUp func(ctx context.Context) bool
	// AdmitCall admits one call a Session stream carries as the node
	// admits a unary call (its per-client shares and its turns), and
	// returns the call's context and leave, which ends its admission; an
	// error (resource_exhausted, or the context's) refuses the call. Nil
	// admits every call.
	AdmitCall func(ctx context.Context) (callCtx context.Context, leave func(), err error)
	// ServeRelay serves another node's relay of rejections (a Watch with
	// rejections.RelayHeader).
	ServeRelay func(ctx context.Context, stream *connect.ServerStream[fencedv1.WatchResponse]) error

	Hub      *fanout.Hub              // the node's applied transitions, for watchers
	Relay    *rejections.Relay        // the leader's rejections, for this node's watchers
	Reads    *sharegate.Gate          // slots for Get and List
	Fanout   *sharegate.Gate          // slots for sends to watchers
	Watchers *admission.StreamLimiter // caps Watch streams
	Sessions *admission.StreamLimiter // caps Session streams; nil: no cap

	ListLimit          int           // Config.ListLimit
	StreamWriteTimeout time.Duration // Config.StreamWriteTimeout
}

// LeaseService returns the lease API, served on any node: locally on the
// leader, by forwarding elsewhere.
func LeaseService(d *Deps) fencedv1connect.LeaseServiceHandler {
	return &routedService{local: &service{d}, Deps: d}
}

// AdminService returns the AdminService (Revoke), served on any node like
// LeaseService.
func AdminService(d *Deps) fencedv1connect.AdminServiceHandler {
	return &routedAdmin{local: &adminService{d}, Deps: d}
}
