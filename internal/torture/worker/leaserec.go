package worker

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/internal/noreplay"
	"github.com/fencedio/fenced/internal/torture/history"
)

// leaseRecorder is the HTTP client of a worker's lease client. It records
// every Acquire, Renew, Release and Get at the wire, including the
// renewals that client.Lease sends on its own, with the time the request
// left and the time the whole answer arrived.
type leaseRecorder struct {
	base *http.Client
	rec  *history.Recorder

	// onAck, if set, is called after an acknowledged acquisition, renewal
	// or release is recorded.
	onAck func(*history.Op)

	mu     sync.Mutex
	owners map[string]string // lease ID -> owner name of its acquisition
}

var _ connect.HTTPClient = (*leaseRecorder)(nil)

func newLeaseRecorder(rec *history.Recorder, dialTimeout time.Duration) *leaseRecorder {
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	return &leaseRecorder{
		base: &http.Client{Transport: noreplay.Transport{Next: &http.Transport{
			Protocols:   protocols,
			DialContext: (&net.Dialer{Timeout: dialTimeout}).DialContext,
		}}},
		rec:    rec,
		owners: map[string]string{},
	}
}

func (r *leaseRecorder) ownerOf(id string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if o, ok := r.owners[id]; ok {
		return o
	}
	return "id:" + id
}

// Do implements connect.HTTPClient.
func (r *leaseRecorder) Do(req *http.Request) (*http.Response, error) {
	if path.Base(req.URL.Path) == "KeepAlive" {
		// The history needs every renewal, and only unary calls are
		// recorded: refused at once, the stream leaves the client's leases
		// renewing with Renew.
		return nil, errors.New("torture: KeepAlive streams are not recorded; renew with Renew")
	}
	if path.Base(req.URL.Path) == "Session" {
		return r.session(req)
	}
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.GetBody = nil // connect's rewinds the body just read; none is needed: noreplay sends a body once
	}
	op, ok := r.decodeRequest(path.Base(req.URL.Path), req.Header.Get("Content-Encoding"), body)
	if !ok {
		return r.base.Do(req)
	}
	r.rec.Begin(op)
	resp, err := r.base.Do(req)
	if err != nil {
		outcome, code := transportOutcome(err)
		r.rec.End(op, outcome, code, err)
		return nil, err
	}
	data, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	if rerr != nil {
		r.rec.End(op, history.Unknown, history.CodeTransport, rerr)
		resp.Body = io.NopCloser(io.MultiReader(bytes.NewReader(data), errReader{rerr}))
		return resp, nil
	}
	resp.Body = io.NopCloser(bytes.NewReader(data))
	r.decodeResponse(op, resp, data)
	return resp, nil
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// transportOutcome classifies an error of a request that got no answer.
// Only a refused connection proves that nothing was sent.
func transportOutcome(err error) (history.Outcome, string) {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return history.Fail, history.CodeRefused
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return history.Unknown, history.CodeTimeout
	}
	return history.Unknown, history.CodeTransport
}

func (r *leaseRecorder) decodeRequest(method, encoding string, body []byte) (*history.Op, bool) {
	if encoding != "" && encoding != "identity" {
		var err error
		if body, err = gunzip(encoding, body); err != nil {
			return nil, false
		}
	}
	switch method {
	case "Acquire":
		var m fencedv1.AcquireRequest
		if proto.Unmarshal(body, &m) != nil {
			return nil, false
		}
		return &history.Op{Kind: history.KindAcquire, Key: m.GetKey(), Owner: m.GetOwner(), TTLMs: m.GetTtlMs(), WaitMs: m.GetWaitMs()}, true
	case "Renew":
		var m fencedv1.RenewRequest
		if proto.Unmarshal(body, &m) != nil {
			return nil, false
		}
		return &history.Op{Kind: history.KindRenew, Key: m.GetKey(), LeaseID: m.GetLeaseId(), Owner: r.ownerOf(m.GetLeaseId())}, true
	case "Release":
		var m fencedv1.ReleaseRequest
		if proto.Unmarshal(body, &m) != nil {
			return nil, false
		}
		return &history.Op{Kind: history.KindRelease, Key: m.GetKey(), LeaseID: m.GetLeaseId(), Owner: r.ownerOf(m.GetLeaseId())}, true
	case "Get":
		var m fencedv1.GetRequest
		if proto.Unmarshal(body, &m) != nil {
			return nil, false
		}
		return &history.Op{Kind: history.KindGet, Key: m.GetKey()}, true
	}
	return nil, false
}

func gunzip(encoding string, b []byte) ([]byte, error) {
	if encoding != "gzip" {
		return nil, fmt.Errorf("unsupported content encoding %q", encoding)
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(zr)
}

// wireError is the Connect protocol's JSON error body.
type wireError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Details []struct {
		Type  string `json:"type"`
		Value string `json:"value"`
	} `json:"details"`
}

func (r *leaseRecorder) decodeResponse(op *history.Op, resp *http.Response, data []byte) {
	if enc := resp.Header.Get("Content-Encoding"); enc != "" && enc != "identity" {
		d, err := gunzip(enc, data)
		if err != nil {
			r.rec.End(op, history.Unknown, history.CodeTransport, fmt.Errorf("undecodable answer: %w", err))
			return
		}
		data = d
	}
	if resp.StatusCode != http.StatusOK {
		r.decodeError(op, resp.StatusCode, data)
		return
	}
	var answer proto.Message
	switch op.Kind {
	case history.KindAcquire:
		answer = new(fencedv1.AcquireResponse)
	case history.KindRenew:
		answer = new(fencedv1.RenewResponse)
	case history.KindRelease:
		answer = new(fencedv1.ReleaseResponse)
	case history.KindGet:
		answer = new(fencedv1.GetResponse)
	}
	if answer != nil {
		if err := proto.Unmarshal(data, answer); err != nil {
			r.rec.End(op, history.Unknown, history.CodeTransport, err)
			return
		}
	}
	r.endOK(op, answer)
}

// endOK records op's success with what its answer says.
func (r *leaseRecorder) endOK(op *history.Op, answer proto.Message) {
	switch m := answer.(type) {
	case *fencedv1.AcquireResponse:
		lease := m.GetLease()
		op.LeaseID, op.Token, op.TTLMs = lease.GetLeaseId(), lease.GetToken(), lease.GetTtlMs()
		r.mu.Lock()
		r.owners[lease.GetLeaseId()] = op.Owner
		r.mu.Unlock()
	case *fencedv1.RenewResponse:
		op.Token, op.TTLMs = m.GetLease().GetToken(), m.GetLease().GetTtlMs()
	case *fencedv1.GetResponse:
		op.LastToken = m.GetLastToken()
		if l := m.GetLease(); l != nil {
			op.HasLease, op.Holder, op.HolderToken = true, l.GetOwner(), l.GetToken()
		}
	}
	r.rec.End(op, history.OK, "", nil)
	if r.onAck != nil && (op.Kind == history.KindAcquire || op.Kind == history.KindRenew || op.Kind == history.KindRelease) {
		r.onAck(op)
	}
}

func (r *leaseRecorder) decodeError(op *history.Op, status int, data []byte) {
	var we wireError
	if err := json.Unmarshal(data, &we); err != nil || we.Code == "" {
		r.rec.End(op, history.Unknown, history.CodeTransport, fmt.Errorf("HTTP %d: %s", status, bytes.TrimSpace(data)))
		return
	}
	var held *fencedv1.LeaseHeld
	for _, d := range we.Details {
		if d.Type != "fenced.v1.LeaseHeld" {
			continue
		}
		raw, derr := base64.RawStdEncoding.DecodeString(strings.TrimRight(d.Value, "="))
		var h fencedv1.LeaseHeld
		if derr == nil && proto.Unmarshal(raw, &h) == nil {
			held = &h
		}
	}
	r.endError(op, we.Code, we.Message, held)
}

// endError records op's failure with a Connect error code: a failure when
// the code proves that nothing was applied, unknown otherwise.
func (r *leaseRecorder) endError(op *history.Op, code, message string, held *fencedv1.LeaseHeld) {
	err := errors.New(code + ": " + message)
	switch code {
	case "failed_precondition":
		op.Holder, op.HolderToken = held.GetOwner(), held.GetToken()
		if op.Kind == history.KindAcquire && op.Holder != "" && op.Holder == op.Owner {
			// Owners are unique per attempt, so the holder is this very
			// acquisition, granted by a node that lost its leadership
			// before answering and retried at the new leader: its outcome
			// is unknown to the caller, not a refusal.
			r.rec.End(op, history.Unknown, history.CodeHeld, err)
			return
		}
		r.rec.End(op, history.Fail, history.CodeHeld, err)
	case "not_found":
		r.rec.End(op, history.Fail, history.CodeNotFound, err)
	case "invalid_argument", "resource_exhausted":
		r.rec.End(op, history.Fail, code, err)
	case "unavailable":
		// Only "not ready" proves that nothing was written to the log; a
		// leadership lost while applying leaves the outcome open.
		if strings.Contains(message, "not ready to serve") {
			r.rec.End(op, history.Fail, history.CodeUnavailable, err)
			return
		}
		r.rec.End(op, history.Unknown, code, err)
	default:
		r.rec.End(op, history.Unknown, code, err)
	}
}
