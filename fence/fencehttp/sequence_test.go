package fencehttp_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencehttp"
)

// A server behind the middleware and a client through the Transport agree
// on sequences: in order, duplicate (409 duplicate-write, the lease kept),
// gap (strict guard), no sequence, a new epoch, and a failed handler that
// records no sequence.
func TestSequenceOverHTTP(t *testing.T) {
	t.Parallel()
	var applied atomic.Int64
	var fail atomic.Bool
	h := fencehttp.Middleware(fence.NewMemory(fence.MemoryConfig{StrictSequences: true}), fencehttp.Config{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fail.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		applied.Add(1)
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()

	lease := &fakeLease{key: "orders/7", token: 5}
	hc := &http.Client{Transport: fencehttp.NewTransport(lease, nil)}
	post := func(seq uint64) (int, error) {
		t.Helper()
		ctx := context.Background()
		if seq != 0 {
			ctx = fence.WithSequence(ctx, seq)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode, fencehttp.ErrorFromResponse(resp)
	}
	steps := []struct {
		token, seq uint64
		fail       bool
		status     int
		want       error
	}{
		{5, 1, false, 200, nil},
		{5, 2, false, 200, nil},
		{5, 2, false, 409, fence.ErrDuplicate},
		{5, 1, false, 409, fence.ErrDuplicate},
		{5, 4, false, 409, fence.ErrSequenceGap},
		{5, 3, true, 500, nil}, // the handler fails: 3 is not recorded
		{5, 3, false, 200, nil},
		{5, 0, false, 200, nil},
		{6, 9, false, 200, nil},
		{6, 9, false, 409, fence.ErrDuplicate},
	}
	wantApplied := int64(0)
	for i, st := range steps {
		lease.token = st.token
		fail.Store(st.fail)
		status, err := post(st.seq)
		if status != st.status || st.want == nil && err != nil || st.want != nil && !errors.Is(err, st.want) {
			t.Fatalf("step %d (token %d seq %d): %d %v, want %d %v", i, st.token, st.seq, status, err, st.status, st.want)
		}
		if errors.Is(err, fence.ErrStaleToken) {
			t.Fatalf("step %d: a duplicate or gap reads as stale: %v", i, err)
		}
		if status == 200 {
			wantApplied++
		}
	}
	if applied.Load() != wantApplied {
		t.Errorf("handler applied %d writes, want %d", applied.Load(), wantApplied)
	}
	if errs := lease.lostErrs(); len(errs) != 0 {
		t.Errorf("lease lost on duplicates or gaps: %v", errs)
	}
}

func TestSequenceHeader(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		vals []string
		want uint64
		err  bool
	}{
		{nil, 0, false},
		{[]string{"1"}, 1, false},
		{[]string{"9223372036854775807"}, fence.MaxSequence, false},
		{[]string{"9223372036854775808"}, 0, true},
		{[]string{"0"}, 0, true},
		{[]string{""}, 0, true},
		{[]string{"-1"}, 0, true},
		{[]string{"1 "}, 0, true},
		{[]string{"01"}, 0, true},
		{[]string{"00"}, 0, true},
		{[]string{"18446744073709551616"}, 0, true},
		{[]string{"1", "2"}, 0, true},
	} {
		h := http.Header{}
		for _, v := range tc.vals {
			h.Add(fencehttp.HeaderSequence, v)
		}
		got, err := fencehttp.SequenceFromHeader(h)
		if got != tc.want || (err != nil) != tc.err || err != nil && !errors.Is(err, fence.ErrInvalidSequence) {
			t.Errorf("%q: %d, %v", tc.vals, got, err)
		}
	}
}

// An invalid Fencing-Sequence is a 400 of its own type; nothing runs.
func TestInvalidSequenceProblem(t *testing.T) {
	t.Parallel()
	ran := false
	h := fencehttp.Middleware(fence.NewMemory(fence.MemoryConfig{}), fencehttp.Config{})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true }))
	req := httptest.NewRequest(http.MethodPost, "/", nil)
	req.Header = fencedHeader("s", "3")
	req.Header.Set(fencehttp.HeaderSequence, "0")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 400 || ran {
		t.Fatalf("status %d, ran %v", rec.Code, ran)
	}
	if p := problemFields(t, rec.Body.Bytes()); p["type"] != fencehttp.ProblemInvalidSequence {
		t.Fatalf("problem %v", p)
	}
}

// A sequenced request that cannot be carried is an unknown outcome, which
// fence.Retry sends again with the same sequence.
func TestTransportUnknownOutcome(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	var seqs []string
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		seqs = append(seqs, r.Header.Get(fencehttp.HeaderSequence))
		if calls.Add(1) == 1 {
			return nil, errors.New("connection reset")
		}
		return &http.Response{StatusCode: 200, Body: http.NoBody, Header: http.Header{}}, nil
	})
	hc := &http.Client{Transport: fencehttp.NewTransport(&fakeLease{key: "s", token: 1}, base)}
	l := &counterSeq{}
	err := fence.Retry(context.Background(), l, 3, func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://127.0.0.1:1/", nil)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		return fencehttp.ErrorFromResponse(resp)
	})
	if err != nil || len(seqs) != 2 || seqs[0] != "1" || seqs[1] != "1" {
		t.Fatalf("Retry: %v; sequences sent %q, want [1 1]", err, seqs)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

type counterSeq struct{ n uint64 }

func (c *counterSeq) NextSequence() uint64 { c.n++; return c.n }

// A Transport over a fence.Sequenced lease numbers its requests; a request
// whose context has a sequence keeps it.
func TestTransportSequencedLease(t *testing.T) {
	t.Parallel()
	var got []string
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		got = append(got, r.Header.Get(fencehttp.HeaderSequence))
		return &http.Response{StatusCode: 200, Body: http.NoBody, Header: http.Header{}}, nil
	})
	hc := &http.Client{Transport: fencehttp.NewTransport(fence.Sequenced(&fakeLease{key: "s", token: 1}), base)}
	for _, ctx := range []context.Context{context.Background(), context.Background(), fence.WithSequence(context.Background(), 9)} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://127.0.0.1:1/", nil)
		req.Header.Set(fencehttp.HeaderSequence, "77") // replaced
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if fmt.Sprint(got) != "[1 2 9]" {
		t.Fatalf("Fencing-Sequence sent %q, want [1 2 9]", got)
	}
}
