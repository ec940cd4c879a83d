package api

import (
	"context"
	"errors"
	"io"
	"net/http"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/server/internal/streamwrite"
)

// keepAliveAhead bounds the requests of one KeepAlive stream read ahead of
// their answers, and so the renewals confirmed together. A client that
// sends faster than it is answered is held back beyond that by HTTP/2 flow
// control.
const keepAliveAhead = 128

type keepAliveStream = connect.BidiStream[fencedv1.KeepAliveRequest, fencedv1.KeepAliveResponse]

// KeepAlive renews leases from a stream of requests, answering each in
// order. A failed renewal is reported in its answer; the stream goes on.
//
// Requests are read ahead while earlier ones are being renewed: those that
// arrived meanwhile are renewed together, behind one leadership
// confirmation that starts after the last of them arrived. A stream with
// many renewals in flight thus pays for one confirmation (a heartbeat
// round in a cluster) per batch rather than per renewal, and the answers
// of a batch leave in one flush.
func (r *routedService) KeepAlive(ctx context.Context, stream *keepAliveStream) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	reqs := make(chan *fencedv1.KeepAliveRequest, keepAliveAhead)
	var readErr error // set before reqs is closed
	go func() {
		defer close(reqs)
		for {
			req, err := stream.Receive()
			if err != nil {
				readErr = err
				return
			}
			select {
			case reqs <- req:
			case <-ctx.Done():
				return
			}
		}
	}()
	if err := r.answerKeepAlives(ctx, stream.Send, reqs); err != nil {
		// net/http forbids reading the body once the handler has returned:
		// end the reader's wait for the next request first.
		cancel()
		streamwrite.From(ctx).EndReads()
		for range reqs {
		}
		return err
	}
	if errors.Is(readErr, io.EOF) {
		return nil
	}
	return readErr
}

// answerKeepAlives answers the requests from reqs, in order, a batch of
// those already read at a time, until reqs is closed or a send fails.
func (r *routedService) answerKeepAlives(ctx context.Context, send func(*fencedv1.KeepAliveResponse) error, reqs <-chan *fencedv1.KeepAliveRequest) error {
	ctl := streamwrite.From(ctx)
	var (
		batch   = make([]*fencedv1.KeepAliveRequest, 0, keepAliveAhead)
		scratch []Renewal
		answers []*fencedv1.KeepAliveResponse
	)
	for req := range reqs {
		batch = append(batch[:0], req)
	more:
		for len(batch) < cap(batch) {
			select {
			case req, ok := <-reqs:
				if !ok {
					break more
				}
				batch = append(batch, req)
			default:
				break more
			}
		}
		scratch, answers = r.keepAliveBatch(ctx, batch, scratch[:0], answers[:0])
		for i, resp := range answers {
			ctl.BeforeSend(0, i < len(answers)-1)
			if err := send(resp); err != nil {
				return err
			}
		}
	}
	return nil
}

// keepAliveBatch answers reqs in order, appending to answers: renewed here
// while this node leads, at the leader otherwise, deciding again for every
// request. b is scratch space, returned for reuse.
func (r *routedService) keepAliveBatch(ctx context.Context, reqs []*fencedv1.KeepAliveRequest, b []Renewal, answers []*fencedv1.KeepAliveResponse) ([]Renewal, []*fencedv1.KeepAliveResponse) {
	if !r.Leader.Ready() {
		for _, req := range reqs {
			answers = append(answers, r.forwardKeepAlive(ctx, req))
		}
		return b, answers
	}
	// The leader's hot path: no request or response to build.
	for _, req := range reqs {
		b = append(b, Renewal{Key: req.GetKey(), ID: req.GetLeaseId()})
	}
	r.local.renewBatch(ctx, b)
	for i, req := range reqs {
		if err := b[i].Err; err != nil && r.retryAtLeader(err, http.Header{}) {
			answers = append(answers, r.forwardKeepAlive(ctx, req))
			continue
		}
		answers = append(answers, r.local.keepAliveAnswer(b[i].Lease, b[i].Err))
	}
	clear(b) // drop the leases until the next batch
	return b, answers
}

// forwardKeepAlive renews the lease of one KeepAlive request as a Renew
// call, served wherever Renew is.
func (r *routedService) forwardKeepAlive(ctx context.Context, req *fencedv1.KeepAliveRequest) *fencedv1.KeepAliveResponse {
	resp, err := r.Renew(ctx, connect.NewRequest(&fencedv1.RenewRequest{Key: req.GetKey(), LeaseId: req.GetLeaseId()}))
	out := &fencedv1.KeepAliveResponse{}
	if err != nil {
		var ce *connect.Error
		if !errors.As(err, &ce) {
			ce = connect.NewError(connect.CodeUnavailable, err)
		}
		out.ErrorCode, out.ErrorMessage = ce.Code().String(), ce.Message()
	} else {
		out.Lease, out.TokenSignature = resp.Msg.GetLease(), resp.Msg.TokenSignature
	}
	return out
}
