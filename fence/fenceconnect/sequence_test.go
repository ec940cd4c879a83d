package fenceconnect_test

import (
	"context"
	"errors"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fenceconnect"
)

// The client interceptor sends the context's sequence; the server's guard
// decides; duplicates and gaps come back as errors SequenceFromError
// decodes, and neither costs the lease.
func TestSequences(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			g := fence.NewMemory(fence.MemoryConfig{StrictSequences: true})
			s := &store{}
			e := newEnv(t, p, g, s)
			lease := &fakeLease{key: "orders/7", token: 5}
			put := e.client(putProcedure, connect.WithInterceptors(fenceconnect.NewClientInterceptor(lease)))
			steps := []struct {
				seq  uint64
				code connect.Code
				want error
			}{
				{1, 0, nil},
				{2, 0, nil},
				{2, connect.CodeAlreadyExists, fence.ErrDuplicate},
				{4, connect.CodeFailedPrecondition, fence.ErrSequenceGap},
				{3, 0, nil},
				{0, 0, nil},
			}
			for i, st := range steps {
				ctx := context.Background()
				if st.seq != 0 {
					ctx = fence.WithSequence(ctx, st.seq)
				}
				_, err := put.CallUnary(ctx, connect.NewRequest(wrapperspb.String("v")))
				if st.want == nil {
					if err != nil {
						t.Fatalf("step %d seq %d: %v", i, st.seq, err)
					}
					continue
				}
				if connect.CodeOf(err) != st.code || !errors.Is(fenceconnect.SequenceFromError(err), st.want) {
					t.Fatalf("step %d seq %d: %v (%v), want %v %v", i, st.seq, err, fenceconnect.SequenceFromError(err), st.code, st.want)
				}
				if _, stale := fenceconnect.StaleFromError(err); stale {
					t.Fatalf("step %d: reads as stale: %v", i, err)
				}
			}
			if n := s.count("orders/7"); n != 4 {
				t.Errorf("%d writes applied, want 4", n)
			}
			if lost := lease.lostErrs(); len(lost) != 0 {
				t.Errorf("lease lost: %v", lost)
			}
		})
	}
}
