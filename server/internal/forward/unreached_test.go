package forward

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
)

// TestForwardFailureToReachLeader: a forwarded call that gets no answer
// from the leader (the connection was refused, reset or broke: connect-go
// reports a reset as canceled) is answered unavailable, or
// deadline_exceeded once the caller's deadline passed; an answer of the
// leader is handed back as it came.
func TestForwardFailureToReachLeader(t *testing.T) {
	f := New(Config{Base: context.Background()})
	forward := func(ctx context.Context, err error) error {
		_, got := Call(f, ctx, func(context.Context) (*connect.Response[struct{}], error) { return nil, err })
		return got
	}
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	leaderAnswer := connect.NewWireError(connect.CodeCanceled, errors.New("the leader says canceled"))
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want connect.Code
	}{
		{"reset", context.Background(), connect.NewError(connect.CodeCanceled, syscall.ECONNRESET), connect.CodeUnavailable},
		{"broken pipe", context.Background(), connect.NewError(connect.CodeCanceled, syscall.EPIPE), connect.CodeUnavailable},
		{"refused", context.Background(), connect.NewError(connect.CodeUnavailable, syscall.ECONNREFUSED), connect.CodeUnavailable},
		{"unknown transport error", context.Background(), connect.NewError(connect.CodeUnknown, errors.New("unexpected EOF")), connect.CodeUnavailable},
		{"caller's deadline passed", expired, connect.NewError(connect.CodeCanceled, syscall.ECONNRESET), connect.CodeDeadlineExceeded},
		{"the leader's own answer", context.Background(), leaderAnswer, connect.CodeCanceled},
	} {
		got := forward(tc.ctx, tc.err)
		if connect.CodeOf(got) != tc.want {
			t.Errorf("%s: forwarded call answered %v (%v), want %v", tc.name, connect.CodeOf(got), got, tc.want)
		}
	}
}
