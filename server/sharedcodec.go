package server

import (
	"fmt"
	"sync"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/internal/gen/fenced/v1"
	"google.golang.org/protobuf/proto"
)

// Codec slots of a hubEvent's shared encodings.
const (
	slotProto = iota
	slotJSON
	slotJSONCharset
	numSlots
)

// encoding is one shared encoding of a Watch message.
type encoding struct {
	once sync.Once
	b    []byte
	err  error
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
			e := &ev.enc[c.slot]
			e.once.Do(func() { e.b, e.err = c.inner.MarshalAppend(nil, w) })
			if e.err != nil {
				return b, e.err
			}
			return append(b, e.b...), nil
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
