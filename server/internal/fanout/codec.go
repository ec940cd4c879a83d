package fanout

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Codecs returns a handler's codecs: binary protobuf and the JSON codec
// of the wire contract, each sharing the encodings of the Watch messages
// of the events h keeps.
func Codecs(h *Hub) []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithCodec(sharingCodec{inner: protoCodec{}, slot: slotProto, hub: h}),
		connect.WithCodec(sharingCodec{inner: jsonCodec{"json"}, slot: slotJSON, hub: h}),
		connect.WithCodec(sharingCodec{inner: jsonCodec{"json; charset=utf-8"}, slot: slotJSONCharset, hub: h}),
	}
}

// Codec slots of an Event's shared encodings.
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
func (ev *Event) envelope(slot int, marshal func([]byte, any) ([]byte, error)) ([]byte, error) {
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
	hub  *Hub
}

func (c sharingCodec) Name() string                    { return c.inner.Name() }
func (c sharingCodec) Unmarshal(b []byte, m any) error { return c.inner.Unmarshal(b, m) }
func (c sharingCodec) Marshal(m any) ([]byte, error)   { return c.MarshalAppend(nil, m) }
func (c sharingCodec) IsBinary() bool                  { return c.slot == slotProto }

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

// jsonCodec is connect's JSON codec, except that answers carry zero values
// too: List of nothing is {"leases":[]} and Get of a new key has
// "lastToken":"0", as the wire contract shows them. Absent messages (the
// lease of a free key) stay absent.
type jsonCodec struct{ name string }

func (c jsonCodec) Name() string { return c.name }

func (c jsonCodec) Marshal(message any) ([]byte, error) { return c.MarshalAppend(nil, message) }

func (jsonCodec) MarshalAppend(b []byte, message any) ([]byte, error) {
	m, ok := message.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", message)
	}
	return protojson.MarshalOptions{EmitDefaultValues: true}.MarshalAppend(b, m)
}

func (jsonCodec) Unmarshal(data []byte, message any) error {
	m, ok := message.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a protobuf message", message)
	}
	if len(data) == 0 {
		return errors.New("empty request body: a JSON object is required")
	}
	// Unknown fields are ignored, so that newer clients work with older
	// servers, as with connect's own codec.
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, m); err != nil {
		return fmt.Errorf("unmarshal into %T: %w", message, err)
	}
	return nil
}
