package fencehttp_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencehttp"
	"github.com/fencedio/fenced/internal/signtest"
)

// signedLease is a lease with a token signature, as *client.Lease is with
// token signing on.
type signedLease struct {
	key, sig string
	token    uint64
}

func (l *signedLease) Key() string       { return l.key }
func (l *signedLease) Token() uint64     { return l.token }
func (l *signedLease) MarkLost(error)    {}
func (l *signedLease) Signature() string { return l.sig }

// Transport sends the signature in Fencing-Token-Signature; the middleware
// in front of a signed guard answers 403 with a bad-signature problem for a
// missing or wrong one, without running the handler or moving the highest
// token.
func TestSignedTokens(t *testing.T) {
	t.Parallel()
	inner := fence.NewMemory(fence.MemoryConfig{})
	signtest.CheckGuard(t, "orders/7", func(v *fence.Verifier) signtest.Mutate {
		srv := httptest.NewServer(fencehttp.Middleware(fence.NewSignedGuard(inner, v), fencehttp.Config{})(
			http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })))
		t.Cleanup(srv.Close)
		return func(ctx context.Context, scope string, token uint64) (bool, error) {
			l := &signedLease{key: scope, token: token, sig: fence.SignatureFrom(ctx)}
			req, err := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL, nil)
			if err != nil {
				return false, err
			}
			resp, err := (&http.Client{Transport: fencehttp.NewTransport(l, nil)}).Do(req)
			if err != nil {
				return false, err
			}
			defer resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent {
				return true, nil
			}
			p, err := fencehttp.DecodeProblem(resp.Body)
			if err != nil {
				return false, err
			}
			if resp.StatusCode == http.StatusForbidden && p.Type == fencehttp.ProblemBadSignature {
				return false, fmt.Errorf("%w: %s", fence.ErrBadSignature, p.Detail)
			}
			return false, fmt.Errorf("status %d: %+v", resp.StatusCode, p)
		}
	}, inner.Highest)
}
