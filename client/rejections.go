package client

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
)

// StaleRejection is one stale rejection as a resource saw it, for
// ReportRejections (fence/fencereport sends them in batches).
type StaleRejection struct {
	Scope     string
	Presented uint64 // the refused token
	Highest   uint64 // the highest token the resource had accepted
	Owner     string // the owner the refused write came with, if known
	Resource  string // names the resource that refused, e.g. "ledger-http"
	Count     uint32 // identical rejections this entry stands for; 0 means 1
}

// ReportRejections sends stale rejections to fenced, which records them on
// its leader. It needs the report permission on each scope once
// authentication is on. It returns how many rejections were recorded. A
// batch with an invalid entry is refused whole (invalid_argument).
func (c *Client) ReportRejections(ctx context.Context, rs []StaleRejection) (uint64, error) {
	msg := &fencedv1.ReportRejectionsRequest{Rejections: make([]*fencedv1.StaleRejection, len(rs))}
	for i, r := range rs {
		msg.Rejections[i] = &fencedv1.StaleRejection{Scope: r.Scope, PresentedToken: r.Presented,
			HighestToken: r.Highest, Owner: r.Owner, Resource: r.Resource, Count: r.Count}
	}
	var resp *connect.Response[fencedv1.ReportRejectionsResponse]
	err := c.eps.do(ctx, func(ep endpoint) (err error) {
		resp, err = ep.rejections.ReportRejections(ctx, connect.NewRequest(msg))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("report %d rejections: %w", len(rs), fromRPC(err))
	}
	return resp.Msg.GetRecorded(), nil
}

// Rejection is what fenced recorded for one scope, resource and presented
// token, with both tokens resolved to their owners and grant times where
// fenced remembers the grants (zero times when it does not).
type Rejection struct {
	Scope    string
	Resource string
	// The refused epoch: its token (generation), owner and grant time.
	Presented        uint64
	PresentedOwner   string
	PresentedGranted time.Time
	// The epoch that fenced it off.
	Highest        uint64
	HighestOwner   string
	HighestGranted time.Time
	// ReportedOwner is the owner the refused write came with.
	ReportedOwner string
	// Count is the rejections of this scope, resource and presented token;
	// ScopeCount those of the scope, ResourceCount those of the resource.
	Count, ScopeCount, ResourceCount uint64
	First, Last                      time.Time
}

func rejectionFromProto(e *fencedv1.Rejection) Rejection {
	return Rejection{Scope: e.GetScope(), Resource: e.GetResource(),
		Presented: e.GetPresentedToken(), PresentedOwner: e.GetPresentedOwner(),
		PresentedGranted: fromUnixMs(e.GetPresentedGrantedUnixMs()),
		Highest:          e.GetHighestToken(), HighestOwner: e.GetHighestOwner(),
		HighestGranted: fromUnixMs(e.GetHighestGrantedUnixMs()), ReportedOwner: e.GetReportedOwner(),
		Count: e.GetCount(), ScopeCount: e.GetScopeCount(), ResourceCount: e.GetResourceCount(),
		First: fromUnixMs(e.GetFirstUnixMs()), Last: fromUnixMs(e.GetLastUnixMs())}
}

func fromUnixMs(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// ListRejections returns the most recent rejections recorded for scopes
// under prefix, newest first (limit 0: the server's default), and the total
// recorded since the leader started leading. It needs the read permission
// on prefix.
func (c *Client) ListRejections(ctx context.Context, prefix string, limit int) ([]Rejection, uint64, error) {
	var resp *connect.Response[fencedv1.ListRejectionsResponse]
	err := c.eps.do(ctx, func(ep endpoint) (err error) {
		resp, err = ep.rejections.ListRejections(ctx, connect.NewRequest(&fencedv1.ListRejectionsRequest{Prefix: prefix, Limit: int32(limit)}))
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("list rejections %q: %w", prefix, fromRPC(err))
	}
	out := make([]Rejection, len(resp.Msg.GetRejections()))
	for i, e := range resp.Msg.GetRejections() {
		out[i] = rejectionFromProto(e)
	}
	return out, resp.Msg.GetTotal(), nil
}

// WatchRejections calls fn for every rejection of a scope under prefix
// that the connected node records from now on (a REJECTED Watch event), in
// order, until ctx ends, the stream breaks or fn returns an error. Lease
// transitions are not passed to fn. Any node sends them (the leader records
// them, the others relay them). Missed rejections are not replayed: around a
// leader change some may be missed; ListRejections shows the recent ones.
func (c *Client) WatchRejections(ctx context.Context, prefix string, fn func(Rejection) error) error {
	var stream *connect.ServerStreamForClient[fencedv1.WatchResponse]
	err := c.eps.do(ctx, func(ep endpoint) (err error) {
		stream, err = ep.streams.Watch(ctx, connect.NewRequest(&fencedv1.WatchRequest{Prefix: prefix, Rejections: true}))
		return err
	})
	if err != nil {
		return fmt.Errorf("watch rejections %q: %w", prefix, fromRPC(err))
	}
	defer stream.Close()
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if ev.GetType() != fencedv1.Event_REJECTED {
			continue
		}
		if err := fn(rejectionFromProto(ev.GetRejection())); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err := stream.Err(); err != nil {
		return fmt.Errorf("watch rejections %q: %w", prefix, fromRPC(err))
	}
	return nil
}
