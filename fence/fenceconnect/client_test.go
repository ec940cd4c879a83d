package fenceconnect_test

import (
	"errors"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fenceconnect"
)

func TestClientInterceptorUnary(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			g := fence.NewMemory(fence.MemoryConfig{})
			e := newEnv(t, p, g, nil)
			seed(t, g, "orders/7", 42)

			current := &fakeLease{key: "orders/7", token: 42}
			put := e.client(putProcedure, connect.WithInterceptors(fenceconnect.NewClientInterceptor(current)))
			req := connect.NewRequest(wrapperspb.String("v"))
			req.Header().Set("Fencing-Token", "1") // replaced by the lease's
			resp, err := put.CallUnary(t.Context(), req)
			if err != nil {
				t.Fatalf("current lease: %v", err)
			}
			if got := resp.Msg.GetValue(); got != "scope=orders/7 token=42" {
				t.Errorf("server saw %q; want the lease's scope and token", got)
			}
			// A failure that is not about the token does not cost the lease.
			if _, err := put.CallUnary(t.Context(), connect.NewRequest(wrapperspb.String("precondition"))); connect.CodeOf(err) != connect.CodeFailedPrecondition {
				t.Fatalf("handler's own failed_precondition: %v", err)
			}
			if _, err := put.CallUnary(t.Context(), connect.NewRequest(wrapperspb.String("fail"))); connect.CodeOf(err) != connect.CodeAborted {
				t.Fatalf("handler's own error: %v", err)
			}
			if lost := current.lostErrs(); len(lost) != 0 {
				t.Fatalf("current lease lost with %v", lost)
			}

			old := &fakeLease{key: "orders/7", token: 41}
			put = e.client(putProcedure, connect.WithInterceptors(fenceconnect.NewClientInterceptor(old)))
			before := e.requests.Load()
			_, err = put.CallUnary(t.Context(), connect.NewRequest(wrapperspb.String("late")))
			if connect.CodeOf(err) != connect.CodeFailedPrecondition {
				t.Fatalf("old lease: %v; want failed_precondition returned to the caller", err)
			}
			if n := e.requests.Load() - before; n != 1 {
				t.Errorf("server saw %d requests for one stale call; want 1 (no retry)", n)
			}
			lost := old.lostErrs()
			if len(lost) != 1 {
				t.Fatalf("MarkLost called %d times; want 1", len(lost))
			}
			if !errors.Is(lost[0], fence.ErrStaleToken) {
				t.Errorf("MarkLost(%v); want an error matching ErrStaleToken", lost[0])
			}
			if stale, ok := errors.AsType[*fence.StaleTokenError](lost[0]); !ok || *stale != (fence.StaleTokenError{Scope: "orders/7", Presented: 41, Highest: 42}) {
				t.Errorf("MarkLost(%#v); want *StaleTokenError{orders/7, 41, 42}", lost[0])
			}
		})
	}
}

func TestClientInterceptorStream(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			g := fence.NewMemory(fence.MemoryConfig{})
			e := newEnv(t, p, g, nil)
			seed(t, g, "s", 10)

			current := &fakeLease{key: "s", token: 10}
			stream, err := e.client(streamProcedure, connect.WithInterceptors(fenceconnect.NewClientInterceptor(current))).
				CallServerStream(t.Context(), connect.NewRequest(wrapperspb.String("v")))
			if err != nil {
				t.Fatal(err)
			}
			var msgs []string
			for stream.Receive() {
				msgs = append(msgs, stream.Msg().GetValue())
			}
			if err := stream.Err(); err != nil || len(msgs) != 3 || msgs[0] != "scope=s token=10" {
				t.Fatalf("current lease stream: %q, %v", msgs, err)
			}
			stream.Close()
			if lost := current.lostErrs(); len(lost) != 0 {
				t.Fatalf("current lease lost with %v", lost)
			}

			old := &fakeLease{key: "s", token: 9}
			before := e.requests.Load()
			stream, err = e.client(streamProcedure, connect.WithInterceptors(fenceconnect.NewClientInterceptor(old))).
				CallServerStream(t.Context(), connect.NewRequest(wrapperspb.String("v")))
			if err == nil {
				for stream.Receive() {
					t.Error("stale stream delivered a message")
				}
				err = stream.Err()
				stream.Close()
			}
			if connect.CodeOf(err) != connect.CodeFailedPrecondition {
				t.Fatalf("stale stream: %v; want failed_precondition", err)
			}
			if n := e.requests.Load() - before; n != 1 {
				t.Errorf("server saw %d requests; want 1 (no retry)", n)
			}
			lost := old.lostErrs()
			if len(lost) != 1 || !errors.Is(lost[0], fence.ErrStaleToken) {
				t.Fatalf("MarkLost calls %v; want exactly one matching ErrStaleToken", lost)
			}
		})
	}
}

func TestClientInterceptorNonASCIIScope(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			g := fence.NewMemory(fence.MemoryConfig{})
			e := newEnv(t, p, g, nil)
			const scope = "commandes/été"
			lease := &fakeLease{key: scope, token: 3}
			put := e.client(putProcedure, connect.WithInterceptors(fenceconnect.NewClientInterceptor(lease)))
			if _, err := put.CallUnary(t.Context(), connect.NewRequest(wrapperspb.String("v"))); err != nil {
				t.Fatal(err)
			}
			if h := highest(t, g, scope); h != 3 {
				t.Fatalf("highest[%q] = %d; want 3", scope, h)
			}
		})
	}
}
