package client

import (
	"errors"
	"testing"

	"connectrpc.com/connect"
)

// TestFromRPCKeepsTheConnectError: the mapped error matches the package's
// sentinel and still carries the Connect error, so callers can read its
// code, message and metadata.
func TestFromRPCKeepsTheConnectError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code connect.Code
		want error
	}{
		{connect.CodeNotFound, ErrNotHeld},
		{connect.CodeInvalidArgument, ErrInvalid},
		{connect.CodeUnavailable, ErrUnavailable},
	} {
		orig := connect.NewError(tc.code, errors.New("said the server"))
		err := fromRPC(orig)
		if !errors.Is(err, tc.want) {
			t.Errorf("%v: %v is not %v", tc.code, err, tc.want)
		}
		var ce *connect.Error
		if !errors.As(err, &ce) || ce != orig {
			t.Errorf("%v: %v does not carry the Connect error", tc.code, err)
		}
	}
}
