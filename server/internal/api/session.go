package api

import (
	"context"
	"errors"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
)

type sessionStream = connect.BidiStream[fencedv1.SessionRequest, fencedv1.SessionResponse]

// Session is not served yet: clients fall back to unary calls.
func (r *routedService) Session(ctx context.Context, stream *sessionStream) error {
	return connect.NewError(connect.CodeUnimplemented, errors.New("fenced.v1.LeaseService.Session is not served by this node"))
}
