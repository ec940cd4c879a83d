package api

import (
	"context"
	"fmt"
	"testing"

	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
)

// keepAliveRequest is the i-th of a pipelined stream over keys ka/0..9:
// every 7th (from the 4th) names a lease that is not the current one.
func keepAliveRequest(i int) *fencedv1.KeepAliveRequest {
	req := &fencedv1.KeepAliveRequest{Key: fmt.Sprintf("ka/%d", i%10), LeaseId: fmt.Sprintf("id%d", i%10)}
	if i%7 == 3 {
		req.LeaseId = "00"
	}
	return req
}

// checkKeepAliveAnswer fails t unless resp is the right answer to
// keepAliveRequest(i).
func checkKeepAliveAnswer(t *testing.T, i int, resp *fencedv1.KeepAliveResponse) {
	t.Helper()
	req := keepAliveRequest(i)
	if i%7 == 3 {
		if resp.GetErrorCode() != "not_found" || resp.GetLease() != nil {
			t.Fatalf("answer %d to a stale renewal of %s: %v, want not_found", i, req.Key, resp)
		}
		return
	}
	if resp.GetErrorCode() != "" || resp.GetLease().GetKey() != req.Key || resp.GetLease().GetLeaseId() != req.LeaseId {
		t.Fatalf("answer %d: %v, want the renewed lease of %s", i, resp, req.Key)
	}
}

// Renewals that arrive while earlier ones wait for their confirmation are
// confirmed together: 99 renewals read while the first waits take one
// more confirmation round (RenewBatch), not 99. The requests are handed to
// the answering loop directly, so what "arrived meanwhile" is exact rather
// than a race between the client's sends and the server's reads.
func TestKeepAliveBatchesWhatArrivedMeanwhile(t *testing.T) {
	keys := make([]string, 10)
	for i := range keys {
		keys[i] = fmt.Sprintf("ka/%d", i)
	}
	node := newFakeNode(keys...)
	waiting, gate := make(chan struct{}), make(chan struct{})
	node.onBatch = func(n int, _ []Renewal) {
		if n == 1 {
			close(waiting)
			<-gate
		}
	}
	r := LeaseService(node.deps()).(*routedService)

	const n = 100
	reqs := make(chan *fencedv1.KeepAliveRequest, n)
	var answers []*fencedv1.KeepAliveResponse
	done := make(chan error, 1)
	go func() {
		done <- r.answerKeepAlives(context.Background(), func(resp *fencedv1.KeepAliveResponse) error {
			answers = append(answers, resp)
			return nil
		}, reqs)
	}()
	reqs <- keepAliveRequest(0)
	<-waiting
	for i := 1; i < n; i++ {
		reqs <- keepAliveRequest(i)
	}
	close(reqs)
	close(gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(answers) != n {
		t.Fatalf("%d answers to %d renewals", len(answers), n)
	}
	for i, resp := range answers {
		checkKeepAliveAnswer(t, i, resp)
	}
	if node.batches != 2 {
		t.Fatalf("%d confirmation rounds for 1 renewal and 99 that arrived while it waited; want 2", node.batches)
	}
	if got := node.counts["renewal"]; got != n {
		t.Errorf("%d renewals counted, want %d", got, n)
	}
}

// A send that fails ends the answers with its error.
func TestKeepAliveStopsAtFailedSend(t *testing.T) {
	r := LeaseService(newFakeNode("ka/0").deps()).(*routedService)
	reqs := make(chan *fencedv1.KeepAliveRequest, 2)
	reqs <- keepAliveRequest(0)
	reqs <- keepAliveRequest(0)
	close(reqs)
	failed := fmt.Errorf("broken stream")
	sends := 0
	err := r.answerKeepAlives(context.Background(), func(*fencedv1.KeepAliveResponse) error {
		sends++
		return failed
	}, reqs)
	if err != failed || sends != 1 {
		t.Fatalf("answerKeepAlives after a failed send: %v after %d sends, want the send's error after 1", err, sends)
	}
}
