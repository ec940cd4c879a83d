package dashboard

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/fanout"
	"github.com/fencedio/fenced/server/internal/streamwrite"
)

// eventsInterval is the least time between two writes to a dashboard
// stream: the transitions meanwhile go out together. A page needs no more
// than 20 updates a second, and 50 dashboards no longer cost a write and a
// system call each per transition. It stays far below what fills a
// subscriber's queue (WatchBuffer events) at any write rate the server
// sustains.
const eventsInterval = 50 * time.Millisecond

// keepaliveInterval spaces the comments that keep an idle stream's
// connection open through proxies.
const keepaliveInterval = 15 * time.Second

// errWrite: a write to a stream failed.
var errWrite = errors.New("write failed")

// Writer writes the frames of one event stream.
type Writer struct {
	w       http.ResponseWriter
	flusher http.Flusher
	rc      *http.ResponseController
	timeout time.Duration
	unacked *streamwrite.Unacked
}

// NewWriter returns the writer of an event stream to w, each write within
// timeout (none when 0) so that a dashboard that stops reading is cut off
// instead of holding its goroutine forever, and none once the connection
// holds more than unacked allows (nil: no bound): then the stream is sent
// "resync" and ends. It is nil when w cannot stream.
func NewWriter(w http.ResponseWriter, timeout time.Duration, unacked *streamwrite.Unacked) *Writer {
	flusher, ok := w.(http.Flusher)
	if !ok {
		return nil
	}
	return &Writer{w: w, flusher: flusher, rc: http.NewResponseController(w), timeout: timeout, unacked: unacked}
}

// write writes and flushes frames, in writes of at most the bound's
// MaxWrite bytes (or of one frame, when larger), and reports success. A
// client that has left more than its bound unacknowledged is sent "resync"
// instead of the rest, and write reports failure: the stream is over.
func (wr *Writer) write(frames ...[]byte) bool {
	maxWrite := wr.unacked.MaxWrite()
	for len(frames) > 0 {
		n, size := 1, len(frames[0])
		for n < len(frames) && (maxWrite == 0 || size+len(frames[n]) <= maxWrite) {
			size += len(frames[n])
			n++
		}
		err := wr.unacked.Send(func() error {
			if !wr.writeFrames(frames[:n]...) {
				return errWrite
			}
			return nil
		})
		if errors.Is(err, streamwrite.ErrBehind) {
			wr.writeFrames(frame("resync", []byte("{}")))
		}
		if err != nil {
			return false
		}
		frames = frames[n:]
	}
	return true
}

// writeFrames writes and flushes frames, and reports success.
func (wr *Writer) writeFrames(frames ...[]byte) bool {
	if wr.timeout > 0 {
		wr.rc.SetWriteDeadline(time.Now().Add(wr.timeout))
	}
	for _, p := range frames {
		if _, err := wr.w.Write(p); err != nil {
			return false
		}
	}
	wr.flusher.Flush()
	return true
}

// Stream is what an event stream sends: a snapshot, then the transitions
// its subscription is offered.
type Stream struct {
	Sub      *fanout.Subscription
	Snapshot []byte          // SnapshotJSON of the leases as of Revision
	Replay   []*fanout.Event // the transitions after Revision dispatched before Sub
	Revision uint64
	// Frame is the "lease" frame of a transition: LeaseFrame of its public
	// wire form, made once per event for every stream (fanout.Event.Frame).
	Frame func(lease.Event) []byte
	// Slot waits for a fan-out slot and returns its release: under overload
	// a dashboard falls behind, and is cut off past its subscription's
	// buffer, rather than the write path slowing down.
	Slot func(context.Context) (release func(), err error)
}

// Serve writes st to wr until ctx ends, a write fails or the subscription
// is cut off.
func (st Stream) Serve(ctx context.Context, wr *Writer) {
	wr.w.Header().Set("Content-Type", "text/event-stream")
	wr.w.Header().Set("Cache-Control", "no-store")
	// Reconnect a second after a lost connection (browsers default to 3s).
	frames := [][]byte{[]byte("retry: 1000\n\n"), frame("snapshot", st.Snapshot)}
	for _, ev := range st.Replay {
		frames = append(frames, ev.Frame(st.Frame))
	}
	st.Snapshot, st.Replay = nil, nil
	release, err := st.Slot(ctx) // sending it is fan-out too
	if err != nil {
		return
	}
	ok := wr.write(frames...)
	release()
	if !ok {
		return
	}
	frames = nil
	keepalive := time.NewTicker(keepaliveInterval)
	defer keepalive.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-keepalive.C:
			if !wr.write([]byte(": keepalive\n\n")) {
				return
			}
		case <-st.Sub.Lost():
			wr.writeFrames(frame("resync", []byte("{}")))
			return
		case <-st.Sub.Ready():
			if !st.sendTransitions(ctx, wr) || !pause(ctx, eventsInterval) {
				return
			}
		}
	}
}

// sendTransitions writes the transitions queued for the subscription
// after the snapshot's revision (those at or before it are in the
// snapshot), once a fan-out slot is free. It reports success.
func (st Stream) sendTransitions(ctx context.Context, wr *Writer) bool {
	release, err := st.Slot(ctx)
	if err != nil {
		return false
	}
	defer release()
	evs := st.Sub.Take()
	defer st.Sub.Recycle(evs)
	frames := make([][]byte, 0, len(evs))
	for _, ev := range evs {
		if ev.Revision > st.Revision {
			frames = append(frames, ev.Frame(st.Frame))
		}
	}
	return len(frames) == 0 || wr.write(frames...)
}

// pause waits for d, or reports false when ctx ends first.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
