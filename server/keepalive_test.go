package server

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/internal/testutil"
)

// acquireKeys acquires n keys "ka/<i>" and returns their lease IDs.
func acquireKeys(t testing.TB, c caller, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		r, err := c.lease.Acquire(context.Background(), connect.NewRequest(&fencedv1.AcquireRequest{Key: fmt.Sprintf("ka/%d", i), Owner: "A", TtlMs: 60_000}))
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = r.Msg.GetLease().GetLeaseId()
	}
	return ids
}

// Renewals sent without waiting for answers are answered one for one, in
// the order sent, a bad one with its own error in its place.
func TestKeepAlivePipelinedInOrder(t *testing.T) {
	_, base := serveAPI(t, Config{})
	c := newH2CCaller(base, "")
	ids := acquireKeys(t, c, 10)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ka := c.lease.KeepAlive(ctx)
	defer ka.CloseResponse()
	const n = 100
	for i := range n {
		if err := ka.Send(keepAliveRequest(ids, i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		resp, err := ka.Receive()
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		checkKeepAliveAnswer(t, ids, i, resp)
	}
	if err := ka.CloseRequest(); err != nil {
		t.Fatal(err)
	}
	if _, err := ka.Receive(); err == nil {
		t.Fatal("an answer after the last request")
	}
}

// keepAliveRequest is the i-th of a pipelined stream over keys ka/0..9:
// every 7th (from the 4th) names a lease that is not the current one.
func keepAliveRequest(ids []string, i int) *fencedv1.KeepAliveRequest {
	req := &fencedv1.KeepAliveRequest{Key: fmt.Sprintf("ka/%d", i%len(ids)), LeaseId: ids[i%len(ids)]}
	if i%7 == 3 {
		req.LeaseId = "00"
	}
	return req
}

// checkKeepAliveAnswer fails t unless resp is the right answer to
// keepAliveRequest(ids, i).
func checkKeepAliveAnswer(t *testing.T, ids []string, i int, resp *fencedv1.KeepAliveResponse) {
	t.Helper()
	key := fmt.Sprintf("ka/%d", i%len(ids))
	if i%7 == 3 {
		if resp.GetErrorCode() != "not_found" || resp.GetLease() != nil {
			t.Fatalf("answer %d to a stale renewal of %s: %v, want not_found", i, key, resp)
		}
		return
	}
	if resp.GetErrorCode() != "" || resp.GetLease().GetKey() != key || resp.GetLease().GetLeaseId() != ids[i%len(ids)] {
		t.Fatalf("answer %d: %v, want the renewed lease of %s", i, resp, key)
	}
}

// BenchmarkKeepAlive renews over KeepAlive streams on a single node, as the
// bench harness's renew-stream workload does: 16 streams with one renewal
// in flight each (serial), or one stream with 64 in flight (pipelined).
// cpu-ns/op is the process's CPU time per renewal, clients included.
func BenchmarkKeepAlive(b *testing.B) {
	for _, bc := range []struct {
		name              string
		streams, inFlight int
	}{{"serial-16", 16, 1}, {"pipelined-64", 1, 64}} {
		b.Run(bc.name, func(b *testing.B) {
			_, base := serveAPI(b, Config{})
			c := newH2CCaller(base, "")
			ids := acquireKeys(b, c, bc.streams)
			var next atomic.Int64
			b.ReportAllocs()
			cpu := testutil.ProcessCPU()
			b.ResetTimer()
			var wg sync.WaitGroup
			for s := range bc.streams {
				wg.Go(func() { keepAliveLoop(b, c, s, ids[s], bc.inFlight, &next) })
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(testutil.ProcessCPU()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// keepAliveLoop renews lease id of key ka/<s> over one stream, with up to
// inFlight renewals unanswered, until next reaches b.N.
func keepAliveLoop(b *testing.B, c caller, s int, id string, inFlight int, next *atomic.Int64) {
	ka := c.lease.KeepAlive(context.Background())
	defer ka.CloseResponse()
	req := &fencedv1.KeepAliveRequest{Key: fmt.Sprintf("ka/%d", s), LeaseId: id}
	defer ka.CloseRequest()
	if inFlight == 1 {
		for next.Add(1) <= int64(b.N) {
			if err := ka.Send(req); err != nil {
				b.Error(err)
				return
			}
			if resp, err := ka.Receive(); err != nil || resp.GetErrorCode() != "" {
				b.Errorf("renewal: %v %v", err, resp.GetErrorMessage())
				return
			}
		}
		return
	}
	credits := make(chan struct{}, inFlight)
	sent := make(chan bool, inFlight)
	go func() {
		defer close(sent)
		for next.Add(1) <= int64(b.N) {
			credits <- struct{}{}
			if err := ka.Send(req); err != nil {
				b.Error(err)
				return
			}
			sent <- true
		}
	}()
	for range sent {
		resp, err := ka.Receive()
		if err != nil || resp.GetErrorCode() != "" {
			b.Errorf("renewal: %v %v", err, resp.GetErrorMessage())
			return
		}
		<-credits
	}
}
