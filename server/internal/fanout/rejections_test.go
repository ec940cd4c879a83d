package fanout

import (
	"fmt"
	"slices"
	"testing"
	"time"

	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/lease"
)

// rejected is the REJECTED event of r, as the node makes it.
func rejected(r *fencedv1.Rejection) *fencedv1.Event {
	return &fencedv1.Event{Type: fencedv1.Event_REJECTED, Rejection: r, Lease: &fencedv1.Lease{Key: r.GetScope()}}
}

// A relay subscription gets the rejections this node records and nothing
// else: no transitions, and no rejection relayed from the leader (which
// would loop between nodes). A watcher gets all three. REJECTED events carry
// the revision of the last transition dispatched before them.
func TestHubRelayDelivery(t *testing.T) {
	h := NewHub(16, 16, watchEvent)
	done := make(chan struct{})
	defer close(done)
	go h.Run(done)
	watcher, _, _ := h.Subscribe("", 0)
	watcher.WantRejections(true)
	relay := h.SubscribeRelay()

	h.Publish(lease.Event{Type: lease.Acquired, Lease: lease.Lease{Key: "k", Token: 5}, Revision: 5})
	h.PublishRejection(rejected(&fencedv1.Rejection{Scope: "k", Resource: "own", PresentedToken: 3}))
	h.PublishRelayed(rejected(&fencedv1.Rejection{Scope: "k", Resource: "relayed", PresentedToken: 3}))
	h.Publish(lease.Event{Type: lease.Released, Lease: lease.Lease{Key: "k", Token: 5}, Revision: 7})
	h.PublishRejection(rejected(&fencedv1.Rejection{Scope: "k", Resource: "last", PresentedToken: 3}))

	got := func(s *Subscription, n int) []string {
		t.Helper()
		var out []string
		for len(out) < n {
			select {
			case <-s.Ready():
			case <-time.After(10 * time.Second):
				t.Fatalf("got %v, want %d events", out, n)
			}
			for _, ev := range s.Take() {
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
	ev := rejectionEvent(rejected(&fencedv1.Rejection{Scope: "k"}), false)
	ev.watch.Event.Revision = 5
	if m := ev.Message(9); m.GetEvent().GetRevision() != 9 || ev.watch.GetEvent().GetRevision() != 5 {
		t.Fatalf("after 9: sent %d, shared message now %d", m.GetEvent().GetRevision(), ev.watch.GetEvent().GetRevision())
	}
	if m := ev.Message(3); m != ev.watch {
		t.Fatalf("after 3: %v, want the shared message", m)
	}
}
