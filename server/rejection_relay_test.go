package server

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/lease"
)

// A relay subscription gets the rejections this node records and nothing
// else: no transitions, and no rejection relayed from the leader (which
// would loop between nodes). A watcher gets all three. REJECTED events carry
// the revision of the last transition dispatched before them.
func TestHubRelayDelivery(t *testing.T) {
	h := newHub(16, 16)
	done := make(chan struct{})
	defer close(done)
	go h.run(done)
	watcher, _, _ := h.subscribe("", 0)
	watcher.rejections.Store(true)
	relay := h.subscribeRelay()

	h.publish(lease.Event{Type: lease.Acquired, Lease: lease.Lease{Key: "k", Token: 5}, Revision: 5})
	h.publishRejection(&fencedv1.Rejection{Scope: "k", Resource: "own", PresentedToken: 3})
	h.publishRelayed(&fencedv1.Rejection{Scope: "k", Resource: "relayed", PresentedToken: 3})
	h.publish(lease.Event{Type: lease.Released, Lease: lease.Lease{Key: "k", Token: 5}, Revision: 7})
	h.publishRejection(&fencedv1.Rejection{Scope: "k", Resource: "last", PresentedToken: 3})

	got := func(s *subscription, n int) []string {
		t.Helper()
		var out []string
		for len(out) < n {
			select {
			case <-s.ready:
			case <-time.After(10 * time.Second):
				t.Fatalf("got %v, want %d events", out, n)
			}
			for _, ev := range s.take() {
				e := ev.watch.GetEvent()
				out = append(out, fmt.Sprintf("%s/%s@%d", e.GetType(), e.GetRejection().GetResource(), e.GetRevision()))
			}
		}
		return out
	}
	check := func(name string, got, want []string) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Fatalf("%s got %v, want %v", name, got, want)
		}
	}
	check("watcher", got(watcher, 5), []string{"ACQUIRED/@5", "REJECTED/own@5", "REJECTED/relayed@5", "RELEASED/@7", "REJECTED/last@7"})
	check("relay", got(relay, 2), []string{"REJECTED/own@5", "REJECTED/last@7"})
}

// A REJECTED event sent to a watcher that resumed after a revision this
// node had not reached carries that revision, without changing the shared
// message; other events go as they are.
func TestWatchMessageNeverGoesBack(t *testing.T) {
	ev := rejectionEvent(&fencedv1.Rejection{Scope: "k"}, false)
	ev.watch.Event.Revision = 5
	if m := watchMessage(ev, 9); m.GetEvent().GetRevision() != 9 || ev.watch.GetEvent().GetRevision() != 5 {
		t.Fatalf("after 9: sent %d, shared message now %d", m.GetEvent().GetRevision(), ev.watch.GetEvent().GetRevision())
	}
	if m := watchMessage(ev, 3); m != ev.watch {
		t.Fatalf("after 3: %v, want the shared message", m)
	}
}

// relayRT sends the header the nodes use to relay rejections, as a client
// might try on the public port, beside an optional bearer token.
type relayRT struct{ token string }

func (s relayRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(relayHeader, "true")
	r.Header.Set(forwardedHeader, "n9")
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
