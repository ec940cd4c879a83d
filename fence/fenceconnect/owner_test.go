package fenceconnect_test

import (
	"context"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fenceconnect"
)

type ownedLease struct {
	fakeLease
	owner string
}

func (l *ownedLease) Owner() string { return l.owner }

// TestOwnerTravelsWithToken checks that the client interceptor sends the
// lease's owner and the server interceptor hands it to the guard's observer.
func TestOwnerTravelsWithToken(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			var (
				mu     sync.Mutex
				owners []string
			)
			g := fence.NewMemory(fence.MemoryConfig{Observer: fence.ObserverFunc(func(_ context.Context, d fence.Decision) {
				mu.Lock()
				defer mu.Unlock()
				owners = append(owners, d.Owner)
			})})
			e := newEnv(t, p, g, nil)
			for _, l := range []fence.Lease{
				&ownedLease{fakeLease: fakeLease{key: "jobs/1", token: 64}, owner: "worker-B"},
				&ownedLease{fakeLease: fakeLease{key: "jobs/1", token: 63}, owner: "worker-A"},
				&fakeLease{key: "jobs/1", token: 62},
			} {
				put := e.client(putProcedure, connect.WithInterceptors(fenceconnect.NewClientInterceptor(l)))
				_, _ = put.CallUnary(t.Context(), connect.NewRequest(wrapperspb.String("v")))
			}
			mu.Lock()
			defer mu.Unlock()
			want := []string{"worker-B", "worker-A", ""}
			if len(owners) != len(want) {
				t.Fatalf("owners %q, want %q", owners, want)
			}
			for i := range want {
				if owners[i] != want[i] {
					t.Errorf("decision %d owner %q, want %q", i, owners[i], want[i])
				}
			}
		})
	}
}
