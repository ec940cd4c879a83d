package k8s_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencedio/fenced/client"
	fencek8s "github.com/fencedio/fenced/contrib/k8s"
	"github.com/fencedio/fenced/contrib/k8s/internal/splitbrain"
	"github.com/fencedio/fenced/internal/fencedtest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

func TestMain(m *testing.M) {
	splitbrain.MaybeChild()
	os.Exit(m.Run())
}

func record(identity string) resourcelock.LeaderElectionRecord {
	return resourcelock.LeaderElectionRecord{HolderIdentity: identity, LeaseDurationSeconds: 2}
}

// The lock's calls as the elector makes them: Get shows the server's
// holder, Create acquires, Update of the holder's own record succeeds
// while its lease lives, a second candidate is refused, an empty record
// releases, and a released or lost lock never leads again.
func TestLock(t *testing.T) {
	ctx := context.Background()
	srv := fencedtest.Start(t)
	c := srv.Client(t, client.Config{})
	a, err := fencek8s.New(c, "ctl", "a")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := fencek8s.New(c, "ctl", "b")

	rec, raw, err := a.Get(ctx)
	if err != nil || rec.HolderIdentity != "" {
		t.Fatalf("Get of a free election: %+v, %v", rec, err)
	}
	if a.Token() != 0 || a.Lease() != nil {
		t.Fatal("a token before the election")
	}
	if err := a.Create(ctx, record("a")); err != nil {
		t.Fatal(err)
	}
	token := a.Token()
	if token == 0 || a.Lease().TTL() != 2*time.Second || a.Lease().Owner() != "a" {
		t.Fatalf("after Create: token %d, lease %+v", token, a.Lease())
	}
	rec, raw2, err := b.Get(ctx)
	if err != nil || rec.HolderIdentity != "a" || rec.LeaseDurationSeconds != 2 || rec.RenewTime.IsZero() {
		t.Fatalf("Get while a leads: %+v, %v", rec, err)
	}
	if string(raw) == string(raw2) {
		t.Fatalf("raw record unchanged by a's election: %s", raw)
	}
	if err := b.Update(ctx, record("b")); !errors.Is(err, client.ErrHeld) {
		t.Fatalf("b's Update while a leads: %v, want ErrHeld", err)
	}
	if err := a.Update(ctx, record("a")); err != nil || a.Token() != token {
		t.Fatalf("a's renewal: %v, token %d (was %d)", err, a.Token(), token)
	}
	if err := a.Update(ctx, record("b")); !errors.Is(err, fencek8s.ErrOtherIdentity) {
		t.Fatalf("a's Update naming b: %v, want ErrOtherIdentity", err)
	}

	// The elector's release (ReleaseOnCancel): an empty holder.
	if err := a.Update(ctx, resourcelock.LeaderElectionRecord{LeaseDurationSeconds: 1}); err != nil {
		t.Fatal(err)
	}
	if a.Token() != 0 || !errors.Is(a.Lease().Err(), client.ErrReleased) {
		t.Fatalf("after release: token %d, lease %v", a.Token(), a.Lease().Err())
	}
	if rec, _, _ := b.Get(ctx); rec.HolderIdentity != "" {
		t.Fatalf("Get after release: %+v", rec)
	}
	// One term per Lock.
	if err := a.Update(ctx, record("a")); !errors.Is(err, client.ErrReleased) {
		t.Fatalf("a's Update after its release: %v, want ErrReleased", err)
	}
	if err := b.Update(ctx, record("b")); err != nil {
		t.Fatal(err)
	}
	if b.Token() <= token {
		t.Fatalf("b's token %d not above a's %d", b.Token(), token)
	}
	b.Lease().MarkLost(errors.New("stale"))
	if err := b.Update(ctx, record("b")); !errors.Is(err, client.ErrLost) {
		t.Fatalf("b's Update after a loss: %v, want ErrLost", err)
	}

	if _, err := fencek8s.New(c, "", "a"); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("New with no name: %v", err)
	}
}

// Two client-go electors on fenced Locks: one leads, the other takes over
// when the first is cancelled (ReleaseOnCancel), with a higher token, and
// both see each leader through OnNewLeader.
func TestRunOrDie(t *testing.T) {
	srv := fencedtest.Start(t)
	c := srv.Client(t, client.Config{})
	type started struct {
		id    string
		token uint64
	}
	elected := make(chan started, 2)
	stopped := make(chan string, 2)
	run := func(ctx context.Context, id string) {
		lock, err := fencek8s.New(c, "ctl", id)
		if err != nil {
			t.Error(err)
			return
		}
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock: lock, LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 50 * time.Millisecond,
			ReleaseOnCancel: true,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) { elected <- started{id, lock.Token()} },
				OnStoppedLeading: func() { stopped <- id },
			},
		})
	}
	ctxs := map[string]context.CancelFunc{}
	done := make(chan struct{}, 2)
	for _, id := range []string{"x", "y"} {
		ctx, cancel := context.WithCancel(context.Background())
		ctxs[id] = cancel
		go func() { run(ctx, id); done <- struct{}{} }()
	}
	first := <-elected
	if first.token == 0 {
		t.Fatal("elected without a token")
	}
	ctxs[first.id]()
	if id := <-stopped; id != first.id {
		t.Fatalf("%s stopped leading, want %s", id, first.id)
	}
	second := <-elected
	if second.id == first.id || second.token <= first.token {
		t.Fatalf("then %+v elected after %+v", second, first)
	}
	ctxs[second.id]()
	<-done
	<-done
}

// The split brain, both ways: with no guard the paused leader's late write
// lands after the new leader's; with one it is refused.
func TestSplitBrain(t *testing.T) {
	for _, guarded := range []bool{false, true} {
		name := map[bool]string{false: "unguarded", true: "guarded"}[guarded]
		t.Run(name, func(t *testing.T) {
			res, err := splitbrain.Run(context.Background(), guarded, tlog{t})
			if err != nil {
				t.Fatal(err)
			}
			if res.TokenB <= res.TokenA {
				t.Fatalf("B's token %d not above A's %d", res.TokenB, res.TokenA)
			}
			if res.StatusB != 204 {
				t.Fatalf("B's write: %d", res.StatusB)
			}
			want := []splitbrain.Write{{Value: "leader-b", Token: res.TokenB}}
			wantA := 409
			if !guarded {
				want = append(want, splitbrain.Write{Value: "leader-a", Token: res.TokenA})
				wantA = 204
			}
			if res.StatusA != wantA {
				t.Errorf("A's late write: %d, want %d", res.StatusA, wantA)
			}
			if len(res.Landed) != len(want) || res.Landed[0] != want[0] || res.Landed[len(want)-1] != want[len(want)-1] {
				t.Errorf("writes that landed: %+v, want %+v", res.Landed, want)
			}
		})
	}
}

type tlog struct{ t *testing.T }

func (l tlog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
