package fenceconnect_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fenceconnect"
	"github.com/fencedio/fenced/fence/fencehttp"
)

func TestInterceptorUnary(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			g := fence.NewMemory(fence.MemoryConfig{})
			e := newEnv(t, p, g, nil)
			const scope = "orders/7"
			steps := []struct {
				token   string
				code    connect.Code // 0: success
				applied bool
				highest uint64
			}{
				{"42", 0, true, 42},
				{"42", 0, true, 42}, // equal token: the holder writes again
				{"43", 0, true, 43},
				{"41", connect.CodeFailedPrecondition, false, 43},
				{"18446744073709551615", 0, true, 1<<64 - 1},
				{"18446744073709551614", connect.CodeFailedPrecondition, false, 1<<64 - 1},
			}
			want := 0
			for i, s := range steps {
				resp, err := e.call(t.Context(), putProcedure, scope, s.token, "v")
				if s.code == 0 {
					if err != nil {
						t.Fatalf("step %d: token %s: %v", i, s.token, err)
					}
					if got := resp.Msg.GetValue(); got != "scope="+scope+" token="+s.token {
						t.Fatalf("step %d: handler saw %q", i, got)
					}
				} else {
					if code := connect.CodeOf(err); code != s.code {
						t.Fatalf("step %d: token %s: code %v (%v); want %v", i, s.token, code, err, s.code)
					}
					stale, ok := fenceconnect.StaleFromError(err)
					if !ok {
						t.Fatalf("step %d: StaleFromError(%v) found no stale detail", i, err)
					}
					presented, _ := fencehttp.ParseToken(s.token)
					if *stale != (fence.StaleTokenError{Scope: scope, Presented: presented, Highest: steps[i-1].highest}) {
						t.Fatalf("step %d: decoded %+v", i, stale)
					}
					if !errors.Is(stale, fence.ErrStaleToken) {
						t.Fatalf("step %d: %v does not match ErrStaleToken", i, stale)
					}
				}
				if s.applied {
					want++
				}
				if got := e.store.count(scope); got != want {
					t.Fatalf("step %d: handler applied %d times; want %d", i, got, want)
				}
				if got := highest(t, g, scope); got != s.highest {
					t.Fatalf("step %d: highest = %d; want %d", i, got, s.highest)
				}
			}
			if p.tls && e.httpMajor.Load() != 2 {
				t.Fatalf("%s ran over HTTP/%d; want HTTP/2", p.name, e.httpMajor.Load())
			}
		})
	}
}

func TestInterceptorRejectsBadHeaders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		scope, token string
	}{
		{"no headers", "", ""},
		{"scope without token", "s", ""},
		{"token without scope", "", "5"},
		{"token 0", "s", "0"},
		{"leading plus", "s", "+5"},
		{"negative", "s", "-5"},
		{"inner space", "s", "5 6"},
		{"hex", "s", "0x5"},
		{"word", "s", "five"},
		{"overflow", "s", "18446744073709551616"},
		{"scope too long", strings.Repeat("s", fence.MaxScopeBytes+1), "5"},
	}
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			g := fence.NewMemory(fence.MemoryConfig{})
			e := newEnv(t, p, g, nil)
			for _, tt := range tests {
				_, err := e.call(t.Context(), putProcedure, tt.scope, tt.token, "v")
				if code := connect.CodeOf(err); code != connect.CodeInvalidArgument {
					t.Errorf("%s: code %v (%v); want invalid_argument", tt.name, code, err)
				}
				if _, ok := fenceconnect.StaleFromError(err); ok {
					t.Errorf("%s: reported as stale", tt.name)
				}
				if n := e.store.count(tt.scope); n != 0 {
					t.Errorf("%s: handler applied %d times; want 0", tt.name, n)
				}
				if tt.scope != "" && len(tt.scope) <= fence.MaxScopeBytes && highest(t, g, tt.scope) != 0 {
					t.Errorf("%s: a token was recorded", tt.name)
				}
			}
			// Two values of one header are ambiguous.
			req := connect.NewRequest(wrapperspb.String("v"))
			req.Header().Set(fencehttp.HeaderScope, "s")
			req.Header().Add(fencehttp.HeaderToken, "5")
			req.Header().Add(fencehttp.HeaderToken, "6")
			if _, err := e.client(putProcedure).CallUnary(t.Context(), req); connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Errorf("two tokens: %v; want invalid_argument", err)
			}
			if n := e.store.count("s"); n != 0 {
				t.Errorf("handler applied %d times; want 0", n)
			}
		})
	}
}

func TestInterceptorHandlerErrorIsNotRecorded(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			g := fence.NewMemory(fence.MemoryConfig{})
			e := newEnv(t, p, g, nil)
			seed(t, g, "s", 10)
			_, err := e.call(t.Context(), putProcedure, "s", "50", "fail")
			if connect.CodeOf(err) != connect.CodeAborted || !strings.Contains(err.Error(), errHandler.Error()) {
				t.Fatalf("failing handler: %v; want its own aborted error unchanged", err)
			}
			if h := highest(t, g, "s"); h != 10 {
				t.Fatalf("highest = %d after a failed call; want 10", h)
			}
			if _, err := e.call(t.Context(), putProcedure, "s", "45", "v"); err != nil {
				t.Fatalf("token 45 after the failed 50: %v; want accepted", err)
			}
		})
	}
}

func TestInterceptorExemptProcedures(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			g := fence.NewMemory(fence.MemoryConfig{})
			e := newEnv(t, p, g, nil)
			seed(t, g, "s", 10)
			if _, err := e.call(t.Context(), getProcedure, "", "", "v"); err != nil {
				t.Errorf("Get without headers: %v; want success", err)
			}
			if _, err := e.call(t.Context(), getProcedure, "s", "3", "v"); err != nil {
				t.Errorf("Get with a stale token: %v; want success (not checked)", err)
			}
			if _, err := e.call(t.Context(), getProcedure, "s", "99", "v"); err != nil || highest(t, g, "s") != 10 {
				t.Errorf("Get with token 99: %v, highest %d; want success and highest unchanged", err, highest(t, g, "s"))
			}
			if _, err := e.call(t.Context(), putProcedure, "", "", "v"); connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Errorf("Put without headers: %v; want invalid_argument", err)
			}
		})
	}
}

func receiveAll(stream *connect.ServerStreamForClient[wrapperspb.StringValue]) (int, error) {
	n := 0
	for stream.Receive() {
		n++
	}
	return n, stream.Err()
}

func TestInterceptorServerStream(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			g := fence.NewMemory(fence.MemoryConfig{})
			e := newEnv(t, p, g, nil)
			open := func(token, value string) (int, error) {
				req := connect.NewRequest(wrapperspb.String(value))
				req.Header().Set(fencehttp.HeaderScope, "s")
				if token != "" {
					req.Header().Set(fencehttp.HeaderToken, token)
				}
				stream, err := e.client(streamProcedure).CallServerStream(t.Context(), req)
				if err != nil {
					return 0, err
				}
				defer stream.Close()
				return receiveAll(stream)
			}

			if n, err := open("5", "v"); err != nil || n != 3 {
				t.Fatalf("stream with 5: %d messages, %v; want 3, nil", n, err)
			}
			if h := highest(t, g, "s"); h != 5 {
				t.Fatalf("highest = %d after the stream; want 5", h)
			}
			// A stream that ends in an error records nothing.
			if n, err := open("9", "fail"); connect.CodeOf(err) != connect.CodeAborted || n != 3 {
				t.Fatalf("failing stream: %d messages, %v; want 3 then aborted", n, err)
			}
			if h := highest(t, g, "s"); h != 5 {
				t.Fatalf("highest = %d after a failed stream; want 5", h)
			}
			applied := e.store.count("s")

			n, err := open("4", "v")
			if connect.CodeOf(err) != connect.CodeFailedPrecondition || n != 0 {
				t.Fatalf("stale stream: %d messages, %v; want 0 and failed_precondition", n, err)
			}
			stale, ok := fenceconnect.StaleFromError(err)
			if !ok || *stale != (fence.StaleTokenError{Scope: "s", Presented: 4, Highest: 5}) {
				t.Fatalf("StaleFromError = %+v, %v", stale, ok)
			}
			if _, err := open("", "v"); connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Fatalf("stream without token: %v; want invalid_argument", err)
			}
			if got := e.store.count("s"); got != applied {
				t.Fatalf("rejected streams reached the handler: %d calls, want %d", got, applied)
			}
		})
	}
}

// A fenced stream keeps its scope locked until it ends: a write to the same
// scope that arrives meanwhile runs after the stream, never during it.
func TestInterceptorStreamHoldsScope(t *testing.T) {
	t.Parallel()
	g := &hookGuard{Guard: fence.NewMemory(fence.MemoryConfig{}), entered: make(chan struct{}, 2)}
	s := &store{streamGate: make(chan struct{}), events: make(chan string, 8)}
	e := newEnv(t, protocols[0], g, s)

	req := connect.NewRequest(wrapperspb.String("v"))
	req.Header().Set(fencehttp.HeaderScope, "s")
	req.Header().Set(fencehttp.HeaderToken, "5")
	stream, err := e.client(streamProcedure).CallServerStream(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() { // the handler is inside the guard, waiting at the gate
		t.Fatalf("first message: %v", stream.Err())
	}
	<-g.entered

	putDone := make(chan error, 1)
	go func() {
		_, err := e.call(context.Background(), putProcedure, "s", "6", "v")
		putDone <- err
	}()
	<-g.entered // the write is at the guard while the stream holds the scope
	close(s.streamGate)
	if n, err := receiveAll(stream); err != nil || n != 2 {
		t.Fatalf("rest of the stream: %d messages, %v", n, err)
	}
	if err := <-putDone; err != nil {
		t.Fatalf("write after the stream: %v", err)
	}
	close(s.events)
	var got []string
	for ev := range s.events {
		got = append(got, ev)
	}
	want := []string{"stream start", "stream end", "put"}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Fatalf("events %q; want %q", got, want)
	}
	if h := highest(t, g, "s"); h != 6 {
		t.Fatalf("highest = %d; want 6", h)
	}
}

func TestInterceptorGuardFailure(t *testing.T) {
	t.Parallel()
	secret := errors.New("dial tcp 10.1.2.3:5432: connection refused")
	for _, tt := range []struct {
		name    string
		guard   *hookGuard
		applied int
	}{
		{"before apply", &hookGuard{Guard: fence.NewMemory(fence.MemoryConfig{}), before: secret}, 0},
		{"after apply", &hookGuard{Guard: fence.NewMemory(fence.MemoryConfig{}), after: secret}, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, protocols[0], tt.guard, nil)
			_, err := e.call(t.Context(), putProcedure, "s", "1", "v")
			if connect.CodeOf(err) != connect.CodeUnavailable {
				t.Fatalf("code %v (%v); want unavailable", connect.CodeOf(err), err)
			}
			if strings.Contains(err.Error(), "10.1.2.3") {
				t.Errorf("error leaks the guard's failure: %v", err)
			}
			if n := e.store.count("s"); n != tt.applied {
				t.Errorf("handler applied %d times; want %d", n, tt.applied)
			}
		})
	}
}

func TestInterceptorPanicRecordsNothingAndPropagates(t *testing.T) {
	t.Parallel()
	g := fence.NewMemory(fence.MemoryConfig{})
	seed(t, g, "s", 10)
	boom := errors.New("boom")
	unary := fenceconnect.NewInterceptor(g, fenceconnect.InterceptorConfig{}).WrapUnary(func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) {
		panic(boom)
	})
	req := connect.NewRequest(wrapperspb.String("v"))
	req.Header().Set(fencehttp.HeaderScope, "s")
	req.Header().Set(fencehttp.HeaderToken, "20")
	func() {
		defer func() {
			if r := recover(); r != boom {
				t.Errorf("recovered %v; want the handler's panic value", r)
			}
		}()
		_, _ = unary(t.Context(), req)
	}()
	if h := highest(t, g, "s"); h != 10 {
		t.Errorf("highest = %d after a panicking handler; want 10", h)
	}
	if err := g.Do(t.Context(), "s", 11, func(context.Context) error { return nil }); err != nil {
		t.Errorf("Do after the panic: %v", err)
	}
}

func TestNewError(t *testing.T) {
	t.Parallel()
	stale := &fence.StaleTokenError{Scope: "s", Presented: 1, Highest: 2}
	own := connect.NewError(connect.CodeAborted, errors.New("mine"))
	tests := []struct {
		err  error
		code connect.Code
	}{
		{stale, connect.CodeFailedPrecondition},
		{fence.ErrNoToken, connect.CodeInvalidArgument},
		{fencehttp.ErrInvalidToken, connect.CodeInvalidArgument},
		{fence.ErrTokenOutOfRange, connect.CodeInvalidArgument},
		{fence.ErrInvalidScope, connect.CodeInvalidArgument},
		{context.Canceled, connect.CodeCanceled},
		{context.DeadlineExceeded, connect.CodeDeadlineExceeded},
		{own, connect.CodeAborted},
		{io.ErrUnexpectedEOF, connect.CodeUnavailable},
	}
	for _, tt := range tests {
		got := fenceconnect.NewError(tt.err)
		if got.Code() != tt.code || !errors.Is(got, tt.err) {
			t.Errorf("NewError(%v) = %v; want code %v wrapping the error", tt.err, got, tt.code)
		}
	}
	if got, ok := fenceconnect.StaleFromError(fenceconnect.NewError(stale)); !ok || got != stale {
		t.Errorf("StaleFromError on the server side = %v, %v; want the original error", got, ok)
	}
	if fenceconnect.NewError(nil) != nil {
		t.Error("NewError(nil) != nil")
	}
}

func TestStaleFromErrorIgnoresLookalikes(t *testing.T) {
	t.Parallel()
	withDetail := func(code connect.Code, fields map[string]any) error {
		s, err := structpb.NewStruct(fields)
		if err != nil {
			t.Fatal(err)
		}
		d, err := connect.NewErrorDetail(s)
		if err != nil {
			t.Fatal(err)
		}
		ce := connect.NewError(code, errors.New("x"))
		ce.AddDetail(d)
		return ce
	}
	good := map[string]any{"type": fencehttp.ProblemStaleToken, "scope": "s", "presentedToken": "1", "highestToken": "2"}
	if _, ok := fenceconnect.StaleFromError(withDetail(connect.CodeFailedPrecondition, good)); !ok {
		t.Fatal("the well-formed detail is not recognised; the cases below prove nothing")
	}
	tests := []struct {
		name string
		err  error
	}{
		{"nil", nil},
		{"plain error", errors.New("stale")},
		{"no detail", connect.NewError(connect.CodeFailedPrecondition, errors.New("held"))},
		{"other code", withDetail(connect.CodeAborted, good)},
		{"no type", withDetail(connect.CodeFailedPrecondition, map[string]any{"scope": "s", "presentedToken": "1", "highestToken": "2"})},
		{"other type", withDetail(connect.CodeFailedPrecondition, map[string]any{"type": "held", "scope": "s", "presentedToken": "1", "highestToken": "2"})},
		{"number tokens", withDetail(connect.CodeFailedPrecondition, map[string]any{"type": fencehttp.ProblemStaleToken, "scope": "s", "presentedToken": 1.0, "highestToken": 2.0})},
		{"bad token", withDetail(connect.CodeFailedPrecondition, map[string]any{"type": fencehttp.ProblemStaleToken, "scope": "s", "presentedToken": "x", "highestToken": "2"})},
	}
	for _, tt := range tests {
		if got, ok := fenceconnect.StaleFromError(tt.err); ok {
			t.Errorf("%s: StaleFromError = %+v; want not stale", tt.name, got)
		}
	}
}
