package client

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
)

// EventType is the kind of a watched transition.
type EventType string

const (
	Acquired EventType = "ACQUIRED"
	Released EventType = "RELEASED"
	Expired  EventType = "EXPIRED"
	// Resync means events were missed: re-read the state with ListRevision
	// and watch again from its revision.
	Resync EventType = "RESYNC"
)

// Event is one lease transition seen by Watch.
type Event struct {
	Type     EventType
	Lease    Info
	Revision uint64
}

// Watch calls fn for every transition under prefix, in order, until ctx
// ends or fn returns an error. With after > 0 it first replays the events
// after that revision that the server still has, or sends a Resync event.
//
// With several endpoints a broken stream is opened again on the next one,
// after the last revision seen, so no transition is missed or repeated
// (revisions are the same on every node); when no revision was seen yet, fn
// gets a Resync event first. With one endpoint, Watch returns nil when the
// server ends the stream, as it does after a Resync when fn takes events
// so slowly that the connection holds more than the server's
// --stream-unacked-bytes unread; over HTTP/2, where the transport reads
// the connection whatever fn does, such a stream is reset instead once its
// flow-control window is spent, and Watch returns the error.
func (c *Client) Watch(ctx context.Context, prefix string, after uint64, fn func(Event) error) error {
	var fnErr error
	broken := 0 // streams broken since the last event
	cur := resumeCursor{after: after}
	for {
		var stream *connect.ServerStreamForClient[fencedv1.WatchResponse]
		var opened endpoint
		err := c.eps.do(ctx, func(ep endpoint) (err error) {
			opened = ep
			stream, err = ep.streams.Watch(ctx, connect.NewRequest(&fencedv1.WatchRequest{Prefix: prefix, AfterRevision: cur.after}))
			return err
		})
		if err != nil {
			return fmt.Errorf("watch %q: %w", prefix, fromRPC(err))
		}
		if broken > 0 && cur.after == 0 {
			if fnErr = fn(Event{Type: Resync}); fnErr != nil {
				stream.Close()
				return fnErr
			}
		}
		for stream.Receive() {
			ev := stream.Msg().GetEvent()
			e := Event{Type: EventType(ev.GetType().String()), Revision: ev.GetRevision()}
			if ev.GetLease() != nil {
				e.Lease = infoFromProto(ev.GetLease())
			}
			if e.Type != Resync && e.Revision > 0 {
				if !cur.deliver(e.Revision) {
					continue // delivered before the stream broke
				}
				broken = 0
			}
			if fnErr = fn(e); fnErr != nil {
				stream.Close()
				return fnErr
			}
		}
		err = stream.Err()
		stream.Close()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		broken++
		eps := c.eps.list()
		if len(eps) == 1 && err == nil {
			return nil
		}
		if len(eps) == 1 || broken > 2*len(eps) {
			if err == nil {
				err = errors.New("stream ended by the server")
			}
			return fmt.Errorf("watch %q: %w", prefix, fromRPC(err))
		}
		for i, ep := range eps {
			if ep.url == opened.url {
				c.eps.failedOver(i)
			}
		}
		cur.resume()
	}
}

// resumeCursor is where a Watch resumes on a new stream after one broke.
// A release or expiry that hands the key to a waiter is two events with one
// revision, and a stream may break between them: the new stream starts
// after the revision before the last one delivered, and skips as many
// events of that revision as were delivered already.
type resumeCursor struct {
	after   uint64 // the AfterRevision of the next stream
	lastRev uint64 // the revision of the last event delivered
	atLast  int    // events of lastRev delivered
	skip    int    // events of lastRev the current stream still repeats
}

// deliver records an event of revision rev and reports whether it is new,
// false for one the current stream repeats.
func (c *resumeCursor) deliver(rev uint64) bool {
	if rev == c.lastRev && c.skip > 0 {
		c.skip--
		return false
	}
	if rev != c.lastRev {
		c.lastRev, c.atLast = rev, 0
	}
	c.atLast++
	c.after, c.skip = c.lastRev-1, 0
	return true
}

// resume prepares for a new stream: it will repeat the events of lastRev
// delivered so far.
func (c *resumeCursor) resume() {
	if c.lastRev > 0 {
		c.skip = c.atLast
	}
}
