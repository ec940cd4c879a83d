package server

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// jsonCodec is connect's JSON codec, except that answers carry zero values
// too: List of nothing is {"leases":[]} and Get of a new key has
// "lastToken":"0", as the wire contract shows them. Absent messages (the
// lease of a free key) stay absent.
type jsonCodec struct{ name string }

var _ connect.Codec = jsonCodec{}

func jsonCodecs() []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithCodec(jsonCodec{"json"}),
		connect.WithCodec(jsonCodec{"json; charset=utf-8"}),
	}
}

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
