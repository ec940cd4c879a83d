package client_test

import (
	"context"
	"errors"
	"sync"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
)

// Session serves each call as the unary method it wraps, each in a
// goroutine of its own, so that answers come in any order; a cancel ends
// its call's context. With noSession it is not implemented, as on a server
// without it.
func (f *fakeService) Session(ctx context.Context, stream *connect.BidiStream[fencedv1.SessionRequest, fencedv1.SessionResponse]) error {
	f.mu.Lock()
	f.sessions++
	no := f.noSession
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.sessionsEnded++
		f.mu.Unlock()
	}()
	if no {
		return connect.NewError(connect.CodeUnimplemented, errors.New("no Session here"))
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex // guards cancels and Send
		cancels = map[uint64]context.CancelFunc{}
	)
	defer wg.Wait()
	for {
		req, err := stream.Receive()
		if err != nil {
			return nil
		}
		mu.Lock()
		if req.GetCancel() != nil {
			if cancel := cancels[req.GetId()]; cancel != nil {
				cancel()
			}
			mu.Unlock()
			continue
		}
		cctx, cancel := context.WithCancel(ctx)
		if ms := req.GetTimeoutMs(); ms > 0 {
			cctx, cancel = context.WithTimeout(ctx, time.Duration(ms)*time.Millisecond)
		}
		cancels[req.GetId()] = cancel
		mu.Unlock()
		f.mu.Lock()
		f.running++
		f.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := f.serve(cctx, req)
			f.mu.Lock()
			f.running--
			f.mu.Unlock()
			mu.Lock()
			defer mu.Unlock()
			cancel()
			delete(cancels, req.GetId())
			stream.Send(resp)
		}()
	}
}

// serve answers one Session call.
func (f *fakeService) serve(ctx context.Context, req *fencedv1.SessionRequest) *fencedv1.SessionResponse {
	resp := &fencedv1.SessionResponse{Id: req.GetId()}
	var err error
	if r := req.GetRenew(); r != nil && r.GetKey() == "" {
		// The probe: refused as the server refuses it.
		err = connect.NewError(connect.CodeInvalidArgument, errors.New("key is empty"))
	} else {
		f.mu.Lock()
		f.sessionCalls++
		f.mu.Unlock()
		switch call := req.GetCall().(type) {
		case *fencedv1.SessionRequest_Acquire:
			var r *connect.Response[fencedv1.AcquireResponse]
			if r, err = f.Acquire(ctx, connect.NewRequest(call.Acquire)); err == nil {
				resp.Result = &fencedv1.SessionResponse_Acquire{Acquire: r.Msg}
			}
		case *fencedv1.SessionRequest_Renew:
			var r *connect.Response[fencedv1.RenewResponse]
			if r, err = f.Renew(ctx, connect.NewRequest(call.Renew)); err == nil {
				resp.Result = &fencedv1.SessionResponse_Renew{Renew: r.Msg}
			}
		case *fencedv1.SessionRequest_Release:
			var r *connect.Response[fencedv1.ReleaseResponse]
			if r, err = f.Release(ctx, connect.NewRequest(call.Release)); err == nil {
				resp.Result = &fencedv1.SessionResponse_Release{Release: r.Msg}
			}
		}
	}
	if err != nil {
		msg := err.Error()
		var ce *connect.Error
		if errors.As(err, &ce) {
			msg = ce.Message()
		}
		resp.Result = &fencedv1.SessionResponse_Error{Error: &fencedv1.SessionError{Code: connect.CodeOf(err).String(), Message: msg}}
	}
	return resp
}

// sessionCounts returns the Session streams opened and the calls they
// carried.
func (f *fakeService) sessionCounts() (streams, calls int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sessions, f.sessionCalls
}

// pending returns the number of Session calls being served.
func (f *fakeService) pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.running
}
