package client

import (
	"context"
	"time"
)

// HoldRenewals returns the renewal of leases: over the client's renewal stream, or
// with Renew. The stream stays open until the returned function is called,
// as while a lease is held.
func HoldRenewals(c *Client) (renew func(ctx context.Context, key, id string) (Info, error), done func()) {
	c.renewals.hold()
	return func(ctx context.Context, key, id string) (Info, error) {
		return c.renew(ctx, time.Time{}, key, id)
	}, c.renewals.drop
}

// SetClock replaces the clock that a renewal's answer is checked against
// before it moves a lease's deadline (time.Now). Call it before Acquire.
func SetClock(c *Client, now func() time.Time) { c.now = now }
