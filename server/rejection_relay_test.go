package server

import (
	"context"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/server/internal/api"
	"github.com/fencedio/fenced/server/internal/rejections"
)

// relayRT sends the header the nodes use to relay rejections, as a client
// might try on the public port, beside an optional bearer token.
type relayRT struct{ token string }

func (s relayRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(rejections.RelayHeader, "true")
	r.Header.Set(api.ForwardedHeader, "n9")
	if s.token != "" {
		r.Header.Set("Authorization", "Bearer "+s.token)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// On the public port the relay header counts for nothing: the Watch is
// authenticated and authorized like any other.
func TestPublicPortIgnoresRelayHeader(t *testing.T) {
	s, base := serveAPI(t, Config{AuthFile: writePolicy(t, testPolicy())})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, token string
		want        connect.Code
	}{
		{"no credentials", "", connect.CodeUnauthenticated},
		{"alice, beyond her prefix", aliceSecret, connect.CodePermissionDenied},
	} {
		st, err := fencedv1connect.NewLeaseServiceClient(&http.Client{Transport: relayRT{tc.token}}, base).
			Watch(ctx, connect.NewRequest(&fencedv1.WatchRequest{Rejections: true}))
		if err == nil {
			for st.Receive() {
			}
			err = st.Err()
			st.Close()
		}
		if codeOf(err) != tc.want {
			t.Errorf("%s: watch with the relay header: %v, want %v", tc.name, err, tc.want)
		}
	}
}
