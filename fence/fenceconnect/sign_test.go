package fenceconnect_test

import (
	"context"
	"fmt"
	"testing"

	"connectrpc.com/connect"
	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fenceconnect"
	"github.com/fencedio/fenced/internal/signtest"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// signedLease is a lease with a token signature, as *client.Lease is with
// token signing on.
type signedLease struct {
	fakeLease
	sig string
}

func (l *signedLease) Signature() string { return l.sig }

// The client interceptor sends the signature; a signed guard behind the
// server interceptor refuses missing and wrong ones with permission_denied
// in every protocol, and the highest token does not move.
func TestSignedTokens(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			inner := fence.NewMemory(fence.MemoryConfig{})
			signtest.CheckGuard(t, "orders/7", func(v *fence.Verifier) signtest.Mutate {
				e := newEnv(t, p, fence.NewSignedGuard(inner, v), nil)
				return func(ctx context.Context, scope string, token uint64) (bool, error) {
					l := &signedLease{fakeLease: fakeLease{key: scope, token: token}, sig: fence.SignatureFrom(ctx)}
					c := e.client(putProcedure, connect.WithInterceptors(fenceconnect.NewClientInterceptor(l)))
					_, err := c.CallUnary(ctx, connect.NewRequest(wrapperspb.String("v")))
					if connect.CodeOf(err) == connect.CodePermissionDenied {
						return false, fmt.Errorf("%w: %v", fence.ErrBadSignature, err)
					}
					return err == nil, err
				}
			}, inner.Highest)
		})
	}
}
