package server

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
)

// A restarted node serves HTTP before it has applied the log it holds. A
// dashboard or a Watch that connects meanwhile must wait: a snapshot of
// the state then would lack the leases the log holds (the page would show
// them as ended unseen), and Watch from now would send their replayed
// grants as new transitions. The node is held in its replay by blocking
// its state machine, and each stream must be seen waiting before the hold
// ends.
func TestStreamsWaitForReplay(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first := newTestServer(t, Config{DataDir: dir})
	held, err := first.Acquire(ctx, "orders/1", "erin", time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}

	hold, applying := make(chan struct{}), make(chan struct{}, 1)
	var endHold sync.Once
	cfg := Config{DataDir: dir, Listen: "127.0.0.1:0", RaftListen: "127.0.0.1:0", MinTTL: 100 * time.Millisecond,
		HeartbeatTimeout: 100 * time.Millisecond, Logger: first.cfg.Logger, beforeApply: func() {
			select {
			case applying <- struct{}{}:
			default:
			}
			<-hold
		}}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	t.Cleanup(func() { endHold.Do(func() { close(hold) }) }) // first: Close waits for the state machine
	waiting := make(chan struct{}, 2)
	s.catchUpWait = func() { waiting <- struct{}{} }
	// Raft counts entries as applied once it has handed them to the state
	// machine: let it hand over the whole log, which the state machine holds.
	<-applying
	for tick := time.Tick(time.Millisecond); s.raft.AppliedIndex() < s.replayedTo; {
		select {
		case <-tick:
		case <-ctx.Done():
			t.Fatalf("raft applied up to %d, not %d", s.raft.AppliedIndex(), s.replayedTo)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.ServeListener(ctx, ln)
	base := "http://" + ln.Addr().String()

	// The dashboard's stream: its snapshot.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	snapshots := make(chan string, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			snapshots <- "request failed: " + err.Error()
			return
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for event := ""; sc.Scan(); {
			line := sc.Text()
			if e, ok := strings.CutPrefix(line, "event: "); ok {
				event = e
			} else if d, ok := strings.CutPrefix(line, "data: "); ok && event == "snapshot" {
				snapshots <- d
				return
			}
		}
		snapshots <- "stream ended: " + resp.Status
	}()
	// Watch from now: its first event. The call returns with the
	// response's headers, sent with the first event.
	client := fencedv1connect.NewLeaseServiceClient(http.DefaultClient, base)
	watched := make(chan *fencedv1.Event, 1)
	go func() {
		stream, err := client.Watch(ctx, connect.NewRequest(&fencedv1.WatchRequest{}))
		if err != nil || !stream.Receive() {
			watched <- nil
			return
		}
		defer stream.Close()
		watched <- stream.Msg().GetEvent()
	}()

	for range 2 {
		select {
		case <-waiting:
		case snap := <-snapshots:
			t.Fatalf("the dashboard got a snapshot while the node replays its log: %s", snap)
		case ev := <-watched:
			t.Fatalf("Watch sent %v while the node replays its log", ev)
		case <-ctx.Done():
			t.Fatal("a stream neither waited for the replay nor sent anything")
		}
	}
	endHold.Do(func() { close(hold) })

	var snap struct {
		Revision uint64                        `json:"revision"`
		Leases   []struct{ Key, Token string } `json:"leases"`
	}
	raw := <-snapshots
	if err := json.Unmarshal([]byte(raw), &snap); err != nil {
		t.Fatalf("snapshot %s: %v", raw, err)
	}
	token := strconv.FormatUint(held.Token, 10)
	if len(snap.Leases) != 1 || snap.Leases[0].Key != held.Key || snap.Leases[0].Token != token {
		t.Errorf("snapshot after the replay = %s, want the lease of %s with token %s", raw, held.Key, token)
	}
	if snap.Revision < held.Token {
		t.Errorf("snapshot revision %d is before the grant at %d", snap.Revision, held.Token)
	}

	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	next, err := s.Acquire(ctx, "orders/2", "frank", time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	ev := <-watched
	if ev.GetType() != fencedv1.Event_ACQUIRED || ev.GetLease().GetKey() != next.Key || ev.GetLease().GetToken() != next.Token {
		t.Errorf("first event of Watch from now = %v, want the grant of %s with token %d", ev, next.Key, next.Token)
	}
}
