package server

import (
	"encoding/binary"
	"fmt"
	"strings"
	"sync"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"google.golang.org/protobuf/proto"
)

// Codec slots of a hubEvent's shared encodings.
const (
	slotProto = iota
	slotJSON
	slotJSONCharset
	numSlots
)

// encoding is one shared encoding of a Watch message, as a whole stream
// envelope: the 5-byte prefix (flags 0, the length) then the message. The
// prefix is the same in the Connect, gRPC and gRPC-Web protocols for an
// uncompressed message, and Watch messages are far below the size from
// which the server compresses.
type encoding struct {
	once sync.Once
	b    []byte
	err  error
}

// envelope returns ev's envelope for the codec of slot, made by the first
// caller only.
func (ev *hubEvent) envelope(slot int, marshal func([]byte, any) ([]byte, error)) ([]byte, error) {
	e := &ev.enc[slot]
	e.once.Do(func() {
		e.b, e.err = marshal(make([]byte, 5, 256), ev.watch)
		if e.err == nil {
			e.b[0] = 0
			binary.BigEndian.PutUint32(e.b[1:5], uint32(len(e.b)-5))
		}
	})
	return e.b, e.err
}

// envelopeSlot is the codec slot of a stream whose request has content type
// ct, or -1 when the server does not share that encoding: "application/grpc"
// and "application/grpc-web" mean protobuf, "application/connect+json" and
// the like name their codec after the "+".
func envelopeSlot(ct string) int {
	ct, _, _ = strings.Cut(ct, ";")
	ct = strings.TrimSpace(ct)
	switch ct {
	case "application/grpc", "application/grpc-web", "application/grpc+proto", "application/grpc-web+proto", "application/connect+proto":
		return slotProto
	case "application/grpc+json", "application/grpc-web+json", "application/connect+json":
		return slotJSON
	}
	return -1
}

// sharingCodec encodes messages with inner, except the Watch messages of
// events the hub still keeps: those are encoded once per codec and the
// bytes copied to every watcher, so that 2,000 watchers of one event cost
// one encoding and 2,000 copies instead of 2,000 encodings. connect calls
// MarshalAppend with a buffer of its own, so the shared bytes are never
// handed to connect to keep or reuse.
type sharingCodec struct {
	inner interface {
		connect.Codec
		MarshalAppend([]byte, any) ([]byte, error)
	}
	slot int
	hub  *hub
}

func (c sharingCodec) Name() string                         { return c.inner.Name() }
func (c sharingCodec) Unmarshal(b []byte, m any) error      { return c.inner.Unmarshal(b, m) }
func (c sharingCodec) Marshal(m any) ([]byte, error)        { return c.MarshalAppend(nil, m) }
func (c sharingCodec) IsBinary() bool                       { return c.slot == slotProto }
func (c sharingCodec) withHub(h *hub) connect.HandlerOption { c.hub = h; return connect.WithCodec(c) }

func (c sharingCodec) MarshalAppend(b []byte, m any) ([]byte, error) {
	if w, ok := m.(*fencedv1.WatchResponse); ok && c.hub != nil {
		if ev := c.hub.encoded(w); ev != nil {
			env, err := ev.envelope(c.slot, c.inner.MarshalAppend)
			if err != nil {
				return b, err
			}
			return append(b, env[5:]...), nil
		}
	}
	return c.inner.MarshalAppend(b, m)
}

// protoCodec is connect's binary protobuf codec.
type protoCodec struct{}

func (protoCodec) Name() string { return "proto" }

func (protoCodec) Marshal(m any) ([]byte, error) { return protoCodec{}.MarshalAppend(nil, m) }

func (protoCodec) MarshalAppend(b []byte, m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", m)
	}
	return proto.MarshalOptions{}.MarshalAppend(b, pm)
}

func (protoCodec) Unmarshal(b []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a protobuf message", m)
	}
	return proto.Unmarshal(b, pm)
}

// codecs returns the handler's codecs: binary protobuf and the JSON codec
// of the wire contract, each sharing the encodings of Watch events.
func (s *Server) codecs() []connect.HandlerOption {
	return []connect.HandlerOption{
		sharingCodec{inner: protoCodec{}, slot: slotProto}.withHub(s.hub),
		sharingCodec{inner: jsonCodec{"json"}, slot: slotJSON}.withHub(s.hub),
		sharingCodec{inner: jsonCodec{"json; charset=utf-8"}, slot: slotJSONCharset}.withHub(s.hub),
	}
}

// watchBatcher returns how a Watch stream sends a batch of events once its
// headers are out: the shared envelopes of the events, copied into one
// buffer written and flushed at once, so that a batch costs one write
// instead of one pass through connect per event. Rejections (whose message
// may be made for this watcher, see watchMessage) go through send, in order.
// Without a stream control or a shared codec slot, every event goes
// through send.
func (s *Server) watchBatcher(ctl *streamControl, slot int) func(evs []*hubEvent, send func(*hubEvent, bool) error) error {
	var marshal func([]byte, any) ([]byte, error)
	switch slot {
	case slotProto:
		marshal = protoCodec{}.MarshalAppend
	case slotJSON:
		marshal = jsonCodec{"json"}.MarshalAppend
	}
	if ctl == nil || marshal == nil {
		return sendEach
	}
	var buf []byte
	return func(evs []*hubEvent, send func(*hubEvent, bool) error) error {
		if buf == nil && len(evs) > 64 {
			if p, _ := burstBufs.Get().(*[]byte); p != nil {
				buf = *p
			}
		}
		buf = buf[:0]
		for i, ev := range evs {
			if ev.rejection {
				if err := s.flushBatch(ctl, &buf); err != nil {
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
			buf = append(buf, env...)
		}
		err := s.flushBatch(ctl, &buf)
		if cap(buf) > 64<<10 {
			// A burst's buffer is not kept for the stream's life, but
			// shared with the next stream that has a burst to send: under
			// overload thousands of watchers each send their queue in
			// turn, and garbage of that size makes the GC scan the leases
			// over and over.
			burstBufs.Put(&buf)
			buf = nil
		}
		return err
	}
}

// sendEach sends evs one by one through send, flushing after the last.
func sendEach(evs []*hubEvent, send func(*hubEvent, bool) error) error {
	for i, ev := range evs {
		if err := send(ev, i < len(evs)-1); err != nil {
			return err
		}
	}
	return nil
}

// burstBufs holds buffers of more than 64 KiB for watchBatcher.
var burstBufs sync.Pool

// flushBatch writes and flushes the envelopes in *buf, if any, and empties it.
func (s *Server) flushBatch(ctl *streamControl, buf *[]byte) error {
	if len(*buf) == 0 {
		return nil
	}
	err := ctl.writeFlush(s.cfg.StreamWriteTimeout, *buf)
	*buf = (*buf)[:0]
	return err
}
