package client

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
)

// ListRevision is List that also returns the revision the answer reflects:
// every transition up to it is included, none after. Watch(ctx, prefix,
// revision, fn) then continues from exactly that state, without missing or
// repeating a transition; that is how a watcher recovers after a Resync
// event. The revision is at least 1.
func (c *Client) ListRevision(ctx context.Context, prefix string, limit int) (leases []Info, revision uint64, err error) {
	var resp *connect.Response[fencedv1.ListResponse]
	err = c.eps.do(ctx, func(ep endpoint) (err error) {
		resp, err = ep.rpc.List(ctx, connect.NewRequest(&fencedv1.ListRequest{Prefix: prefix, Limit: int32(min(limit, 1<<31-1))}))
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("list %q: %w", prefix, fromRPC(err))
	}
	leases = make([]Info, len(resp.Msg.GetLeases()))
	for i, l := range resp.Msg.GetLeases() {
		leases[i] = infoFromProto(l)
	}
	return leases, resp.Msg.GetRevision(), nil
}
