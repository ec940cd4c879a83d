package client

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
)

// KeepAliveStream renews leases over one stream (the KeepAlive RPC), which
// costs the server less per renewal than Renew. It needs HTTP/2, which the
// default client uses for streams. It is not safe for concurrent use: give each
// goroutine its own.
//
// Leases from Acquire renew themselves over a stream of the client's own
// (see renewstream.go); KeepAliveStream is for callers that renew leases by
// ID themselves.
type KeepAliveStream struct {
	stream *connect.BidiStreamForClient[fencedv1.KeepAliveRequest, fencedv1.KeepAliveResponse]
	eps    *endpointList
	ep     int // index of the endpoint in eps
}

// KeepAlive opens a renewal stream to the endpoint in use. It lasts until
// ctx ends or Close; after a stream error open a new one, which goes to the
// next endpoint if that one failed.
func (c *Client) KeepAlive(ctx context.Context) *KeepAliveStream {
	i, ep := c.eps.pick()
	return &KeepAliveStream{stream: ep.streams.KeepAlive(ctx), eps: &c.eps, ep: i}
}

// Renew renews lease id of key once and waits for the answer. A lease that
// is not current gives an error matching ErrNotHeld; the stream stays
// usable. A stream error ends the stream: open a new one.
func (k *KeepAliveStream) Renew(key, id string) (Info, error) {
	if err := k.stream.Send(&fencedv1.KeepAliveRequest{Key: key, LeaseId: id}); err != nil {
		k.eps.failedOver(k.ep)
		return Info{}, fmt.Errorf("keepalive %q: %w", key, fromRPC(err))
	}
	resp, err := k.stream.Receive()
	if err != nil {
		k.eps.failedOver(k.ep)
		return Info{}, fmt.Errorf("keepalive %q: %w", key, fromRPC(err))
	}
	if code := resp.GetErrorCode(); code != "" {
		var c connect.Code
		if err := c.UnmarshalText([]byte(code)); err != nil {
			c = connect.CodeUnknown
		}
		return Info{}, fmt.Errorf("keepalive %q: %w", key, fromRPC(connect.NewError(c, errors.New(resp.GetErrorMessage()))))
	}
	return infoFromProto(resp.GetLease()), nil
}

// Close ends the stream.
func (k *KeepAliveStream) Close() error {
	err := k.stream.CloseRequest()
	if rerr := k.stream.CloseResponse(); err == nil {
		err = rerr
	}
	return err
}
