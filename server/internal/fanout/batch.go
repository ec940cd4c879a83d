package fanout

import "sync"

// A Batcher sends a batch of a Watch stream's events, in order; send sends
// one event through connect, more reporting that others follow it (so that
// it need not flush).
type Batcher func(evs []*Event, send func(ev *Event, more bool) error) error

// NewBatcher returns how a Watch stream whose request has content type ct
// sends a batch of events once its headers are out: the shared envelopes of
// the events, copied into one buffer given to writeFlush at once, so that a
// batch costs one write instead of one pass through connect per event;
// with maxWrite > 0, in writes of at most maxWrite bytes (or of one
// envelope, when larger).
// Rejections (whose message may be made for this watcher, see Message) go
// through send, in order. Without writeFlush, or for a codec whose
// encodings are not shared, every event goes through send.
func NewBatcher(ct string, writeFlush func([]byte) error, maxWrite int) Batcher {
	slot := envelopeSlot(ct)
	var marshal func([]byte, any) ([]byte, error)
	switch slot {
	case slotProto:
		marshal = protoCodec{}.MarshalAppend
	case slotJSON:
		marshal = jsonCodec{"json"}.MarshalAppend
	}
	if writeFlush == nil || marshal == nil {
		return sendEach
	}
	var buf []byte
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		err := writeFlush(buf)
		buf = buf[:0]
		return err
	}
	return func(evs []*Event, send func(*Event, bool) error) error {
		if buf == nil && len(evs) > 64 {
			if p, _ := burstBufs.Get().(*[]byte); p != nil {
				buf = *p
			}
		}
		buf = buf[:0]
		for i, ev := range evs {
			if ev.rejection {
				if err := flush(); err != nil {
					return err
				}
				if err := send(ev, i < len(evs)-1); err != nil {
					return err
				}
				continue
			}
			env, err := ev.envelope(slot, marshal)
			if err != nil {
				return err
			}
			if maxWrite > 0 && len(buf)+len(env) > maxWrite {
				if err := flush(); err != nil {
					return err
				}
			}
			buf = append(buf, env...)
		}
		err := flush()
		if cap(buf) > 64<<10 {
			// A burst's buffer is not kept for the stream's life, but
			// shared with the next stream that has a burst to send: under
			// overload thousands of watchers each send their queue in
			// turn, and garbage of that size makes the GC scan the leases
			// over and over. The pool gets a slice of its own: the
			// stream's variable is reused for its next burst.
			pooled := buf[:0]
			burstBufs.Put(&pooled)
			buf = nil
		}
		return err
	}
}

// sendEach sends evs one by one through send, flushing after the last.
func sendEach(evs []*Event, send func(*Event, bool) error) error {
	for i, ev := range evs {
		if err := send(ev, i < len(evs)-1); err != nil {
			return err
		}
	}
	return nil
}

// burstBufs holds buffers of more than 64 KiB for NewBatcher.
var burstBufs sync.Pool
