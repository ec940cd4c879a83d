package worker

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"

	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/internal/torture/history"
)

// Connect's streaming envelope: a flags byte, a 4-byte big-endian length,
// the message.
const (
	envelopeHeader     = 5
	envelopeCompressed = 0b01
	envelopeEndStream  = 0b10
)

// session records the calls of one Session stream at the wire: each call
// begins when the transport takes its last request byte from the client
// (before it can reach the server) and ends when its answer has been read
// whole. Calls still unanswered when the answers stop (end of stream, a
// read error, the client closing the stream) end unknown: they were sent,
// so they may have taken effect.
func (r *leaseRecorder) session(req *http.Request) (*http.Response, error) {
	if !strings.HasPrefix(req.Header.Get("Content-Type"), "application/connect+") {
		// The history needs every call; only Connect's framing is decoded.
		return nil, fmt.Errorf("torture: Session streams are recorded in the Connect protocol only, not %q", req.Header.Get("Content-Type"))
	}
	s := &sessionRecording{r: r, calls: map[uint64]*history.Op{}}
	if req.Body != nil {
		req.Body = &envelopeReader{rc: req.Body, encoding: req.Header.Get("Connect-Content-Encoding"), onMessage: s.request}
	}
	resp, err := r.base.Do(req)
	if err != nil {
		outcome, code := transportOutcome(err)
		s.endAll(outcome, code, err)
		return nil, err
	}
	resp.Body = &envelopeReader{
		rc: resp.Body, encoding: resp.Header.Get("Connect-Content-Encoding"),
		onMessage: s.answer,
		onEnd: func(err error) {
			if err == nil {
				err = errors.New("the Session stream ended")
			}
			s.endAll(history.Unknown, history.CodeTransport, err)
		},
	}
	return resp, nil
}

type sessionRecording struct {
	r     *leaseRecorder
	mu    sync.Mutex
	calls map[uint64]*history.Op // sent and not yet answered, by call id
}

// request records a call as it leaves. A cancel is not a call: the call
// it names still gets its one answer.
func (s *sessionRecording) request(flags byte, msg []byte) error {
	if flags&envelopeEndStream != 0 {
		return nil
	}
	var m fencedv1.SessionRequest
	if err := proto.Unmarshal(msg, &m); err != nil {
		return fmt.Errorf("torture: undecodable Session request: %w", err)
	}
	var op *history.Op
	switch c := m.GetCall().(type) {
	case *fencedv1.SessionRequest_Acquire:
		a := c.Acquire
		op = &history.Op{Kind: history.KindAcquire, Key: a.GetKey(), Owner: a.GetOwner(), TTLMs: a.GetTtlMs(), WaitMs: a.GetWaitMs()}
	case *fencedv1.SessionRequest_Renew:
		op = &history.Op{Kind: history.KindRenew, Key: c.Renew.GetKey(), LeaseID: c.Renew.GetLeaseId(), Owner: s.r.ownerOf(c.Renew.GetLeaseId())}
	case *fencedv1.SessionRequest_Release:
		op = &history.Op{Kind: history.KindRelease, Key: c.Release.GetKey(), LeaseID: c.Release.GetLeaseId(), Owner: s.r.ownerOf(c.Release.GetLeaseId())}
	}
	if op == nil || op.Key == "" {
		// A cancel, or a call the server refuses as invalid without
		// touching any lease (the client's probe of a new stream).
		return nil
	}
	op.Via = history.ViaSession
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.calls[m.GetId()]; dup {
		return fmt.Errorf("torture: Session call id %d reused while in flight", m.GetId())
	}
	s.r.rec.Begin(op)
	s.calls[m.GetId()] = op
	return nil
}

// answer records the outcome of the call it answers.
func (s *sessionRecording) answer(flags byte, msg []byte) error {
	if flags&envelopeEndStream != 0 {
		var end struct {
			Error *wireError `json:"error"`
		}
		err := errors.New("the Session stream ended")
		if json.Unmarshal(msg, &end) == nil && end.Error != nil {
			err = fmt.Errorf("the Session stream ended: %s: %s", end.Error.Code, end.Error.Message)
		}
		s.endAll(history.Unknown, history.CodeTransport, err)
		return nil
	}
	var m fencedv1.SessionResponse
	if err := proto.Unmarshal(msg, &m); err != nil {
		return fmt.Errorf("torture: undecodable Session answer: %w", err)
	}
	s.mu.Lock()
	op, ok := s.calls[m.GetId()]
	delete(s.calls, m.GetId())
	s.mu.Unlock()
	if !ok {
		return nil // not recorded (the probe)
	}
	switch res := m.GetResult().(type) {
	case *fencedv1.SessionResponse_Error:
		s.r.endError(op, res.Error.GetCode(), res.Error.GetMessage(), res.Error.GetHeld())
	case *fencedv1.SessionResponse_Acquire:
		s.r.endOK(op, res.Acquire)
	case *fencedv1.SessionResponse_Renew:
		s.r.endOK(op, res.Renew)
	case *fencedv1.SessionResponse_Release:
		s.r.endOK(op, res.Release)
	default:
		s.r.rec.End(op, history.Unknown, history.CodeTransport, fmt.Errorf("answer %d carries no result", m.GetId()))
	}
	return nil
}

// endAll ends every call still waiting for its answer.
func (s *sessionRecording) endAll(outcome history.Outcome, code string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, op := range s.calls {
		s.r.rec.End(op, outcome, code, err)
		delete(s.calls, id)
	}
}

// envelopeReader passes a Connect stream through, calling onMessage with
// each whole message (decompressed) before the read that completes it
// returns, and onEnd once when the stream ends or fails, or is closed.
type envelopeReader struct {
	rc        io.ReadCloser
	encoding  string
	onMessage func(flags byte, msg []byte) error
	onEnd     func(error)

	buf   []byte
	ended sync.Once // Close may come from another goroutine than Read
}

func (e *envelopeReader) Read(p []byte) (int, error) {
	n, err := e.rc.Read(p)
	e.buf = append(e.buf, p[:n]...)
	for len(e.buf) >= envelopeHeader {
		size := int(binary.BigEndian.Uint32(e.buf[1:envelopeHeader]))
		if len(e.buf) < envelopeHeader+size {
			break
		}
		flags, msg := e.buf[0], e.buf[envelopeHeader:envelopeHeader+size]
		if flags&envelopeCompressed != 0 {
			d, derr := gunzip(e.encoding, msg)
			if derr != nil {
				return n, e.fail(fmt.Errorf("torture: undecodable Session message: %w", derr))
			}
			msg = d
		}
		if merr := e.onMessage(flags, msg); merr != nil {
			return n, e.fail(merr)
		}
		e.buf = e.buf[envelopeHeader+size:]
	}
	if err != nil {
		e.end(err)
		if errors.Is(err, io.EOF) {
			return n, io.EOF
		}
	}
	return n, err
}

// fail ends the stream with err: a message the history cannot record
// must not pass unrecorded.
func (e *envelopeReader) fail(err error) error {
	e.end(err)
	return err
}

func (e *envelopeReader) end(err error) {
	if e.onEnd == nil {
		return
	}
	e.ended.Do(func() {
		if errors.Is(err, io.EOF) {
			err = nil
		}
		e.onEnd(err)
	})
}

func (e *envelopeReader) Close() error {
	e.end(errors.New("the client closed the Session stream"))
	return e.rc.Close()
}
