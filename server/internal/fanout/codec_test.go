package fanout

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"

	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/lease"
	"google.golang.org/protobuf/proto"
)

// keptEvents returns a hub that has dispatched transitions of the given
// revisions, and their shared events.
func keptEvents(t *testing.T, history int, revs ...uint64) (*Hub, []*Event) {
	t.Helper()
	h := NewHub(history, 16, watchEvent)
	var evs []*Event
	for _, rev := range revs {
		evs = append(evs, &Event{Event: lease.Event{Type: lease.Acquired, Revision: rev, Lease: lease.Lease{Key: fmt.Sprint("k/", rev)}}})
	}
	var batch []item
	for _, ev := range evs {
		batch = append(batch, item{ev: ev})
	}
	h.mu.Lock()
	h.dispatch(batch)
	h.mu.Unlock()
	return h, evs
}

// The Watch message of a kept event is encoded once per codec, and every
// watcher gets the bytes its codec alone would have made; a message the hub
// no longer keeps, or another message, is encoded as usual.
func TestSharingCodecEncodesKeptEventsOnce(t *testing.T) {
	h, evs := keptEvents(t, 1, 5, 6) // 5 is evicted, 6 kept
	for _, c := range []sharingCodec{
		{inner: protoCodec{}, slot: slotProto, hub: h},
		{inner: jsonCodec{"json"}, slot: slotJSON, hub: h},
	} {
		slot := c.slot
		for _, m := range []proto.Message{evs[0].watch, evs[1].watch, &fencedv1.GetResponse{LastToken: 3}} {
			want, err := c.inner.MarshalAppend([]byte("prefix"), m)
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				got, err := c.MarshalAppend([]byte("prefix"), m)
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("slot %d, %v: %q %v, want %q", slot, m, got, err, want)
				}
			}
		}
		if evs[0].enc[slot].b != nil {
			t.Errorf("slot %d: an evicted event's encoding was shared", slot)
		}
		if shared := evs[1].enc[slot].b; shared == nil {
			t.Errorf("slot %d: a kept event's encoding was not shared", slot)
		} else if got, _ := c.MarshalAppend(nil, evs[1].watch); &shared[5] == &got[0] {
			t.Errorf("slot %d: the shared bytes were handed out, not copied", slot)
		}
	}
}

// Each content type of a stream maps to the codec slot whose encodings it
// can use, or none.
func TestEnvelopeSlot(t *testing.T) {
	for ct, want := range map[string]int{
		"application/grpc": slotProto, "application/grpc-web+proto": slotProto, "application/connect+proto": slotProto,
		"application/grpc+json": slotJSON, "application/connect+json; charset=utf-8": slotJSON,
		"application/json": -1, "application/grpc+gzip": -1, "": -1,
	} {
		if got := envelopeSlot(ct); got != want {
			t.Errorf("envelopeSlot(%q) = %d, want %d", ct, got, want)
		}
	}
}

// A batch goes out as one write of the events' envelopes; a rejection
// between them goes through send, in order, the envelopes before it
// written first.
func TestBatcherWritesEnvelopesTogether(t *testing.T) {
	_, evs := keptEvents(t, 8, 5, 6, 7)
	rej := rejectionEvent(rejected(&fencedv1.Rejection{Scope: "k/5"}), false)
	var log []string
	writeFlush := func(b []byte) error {
		var revs []uint64
		for len(b) > 0 {
			if b[0] != 0 || len(b) < 5 {
				t.Fatalf("envelope %q: not an uncompressed message", b)
			}
			n := binary.BigEndian.Uint32(b[1:5])
			var m fencedv1.WatchResponse
			if err := proto.Unmarshal(b[5:5+n], &m); err != nil {
				t.Fatal(err)
			}
			revs = append(revs, m.GetEvent().GetRevision())
			b = b[5+n:]
		}
		log = append(log, fmt.Sprint("write ", revs))
		return nil
	}
	send := func(ev *Event, more bool) error {
		log = append(log, fmt.Sprint("send ", ev.Message(0).GetEvent().GetType(), " ", more))
		return nil
	}
	if err := NewBatcher("application/grpc", writeFlush, 0)([]*Event{evs[0], evs[1], rej, evs[2]}, send); err != nil {
		t.Fatal(err)
	}
	want := []string{"write [5 6]", "send REJECTED true", "write [7]"}
	if !slices.Equal(log, want) {
		t.Errorf("batched: %q, want %q", log, want)
	}
	log = nil
	if err := NewBatcher("application/json", writeFlush, 0)(evs, send); err != nil {
		t.Fatal(err)
	}
	want = []string{"send ACQUIRED true", "send ACQUIRED true", "send ACQUIRED false"}
	if !slices.Equal(log, want) {
		t.Errorf("a codec without shared encodings: %q, want %q", log, want)
	}
}

// With maxWrite, a batch goes out in writes of at most maxWrite bytes of
// whole envelopes; an envelope larger than maxWrite goes alone.
func TestBatcherSplitsWrites(t *testing.T) {
	_, evs := keptEvents(t, 8, 5, 6, 7)
	var sizes []int
	for _, ev := range evs {
		env, err := ev.envelope(slotProto, protoCodec{}.MarshalAppend)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(env))
	}
	var writes []int
	writeFlush := func(b []byte) error { writes = append(writes, len(b)); return nil }
	for _, c := range []struct {
		maxWrite int
		want     []int
	}{
		{0, []int{sizes[0] + sizes[1] + sizes[2]}},
		{sizes[0] + sizes[1], []int{sizes[0] + sizes[1], sizes[2]}},
		{1, sizes},
	} {
		writes = nil
		if err := NewBatcher("application/grpc", writeFlush, c.maxWrite)(evs, nil); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(writes, c.want) {
			t.Errorf("envelopes of %v bytes with maxWrite %d: writes of %v bytes, want %v", sizes, c.maxWrite, writes, c.want)
		}
	}
}

// A burst's buffer goes to the pool whole and stays the pool's: the next
// stream with a burst reuses it, and the stream that gave it writes its
// next burst elsewhere.
func TestBatcherPoolsBurstBuffers(t *testing.T) {
	var evs []*Event
	for rev := range uint64(100) { // 100 envelopes of over 1 KiB
		ev := &Event{Event: lease.Event{Type: lease.Acquired, Revision: rev + 1, Lease: lease.Lease{Key: fmt.Sprintf("k/%01000d", rev)}}}
		ev.watch = &fencedv1.WatchResponse{Event: watchEvent(ev.Event)}
		evs = append(evs, ev)
	}
	written := 0
	batch := NewBatcher("application/grpc", func(b []byte) error { written += len(b); return nil }, 0)
	send := func(*Event, bool) error { t.Fatal("an event sent through connect"); return nil }
	var pooled *[]byte
	// The pool may drop what it is given (it does at random under the race
	// detector): burst again until it keeps one.
	for range 50 {
		written = 0
		if err := batch(evs, send); err != nil {
			t.Fatal(err)
		}
		if pooled, _ = burstBufs.Get().(*[]byte); pooled != nil {
			break
		}
	}
	if pooled == nil {
		t.Fatal("no burst buffer pooled after 50 bursts")
	}
	if len(*pooled) != 0 || cap(*pooled) < written {
		t.Fatalf("pooled buffer of len %d, cap %d; want an empty one of at least a burst (%d bytes)", len(*pooled), cap(*pooled), written)
	}
	array := &(*pooled)[:1][0]
	if err := batch(evs, send); err != nil {
		t.Fatal(err)
	}
	if len(*pooled) != 0 || &(*pooled)[:1][0] != array {
		t.Fatal("the pooled buffer changed with its stream's next burst")
	}
}
