package store_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencehttp"
	"github.com/fencedio/fenced/internal/testutil"
	"github.com/fencedio/fenced/store"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  store.Config
		ok   bool
	}{
		{"no data dir", store.Config{}, false},
		{"negative value limit", store.Config{DataDir: "x", MaxValueBytes: -1}, false},
		{"minimal", store.Config{DataDir: "x"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
			if !tt.ok {
				if _, err := store.Open(tt.cfg); err == nil {
					t.Fatal("Open accepted an invalid config")
				}
			}
		})
	}
}

func TestPutGetRoundTrip(t *testing.T) {
	e := newEnv(t, store.Config{})
	const scope = "orders/7"

	r := e.put("orders/7/total", scope, 7, "100 EUR")
	mustStatus(t, "PUT token 7", r, http.StatusNoContent)
	if got := r.header.Get(store.HeaderAuditSeq); got != "1" {
		t.Errorf("PUT %s = %q, want 1", store.HeaderAuditSeq, got)
	}
	e.wantObject("orders/7/total", scope, 7, "100 EUR")

	// The holder writes many times with one token; a newer holder writes on.
	mustStatus(t, "PUT same token", e.put("orders/7/total", scope, 7, "110 EUR"), http.StatusNoContent)
	e.wantObject("orders/7/total", scope, 7, "110 EUR")
	mustStatus(t, "PUT token 9", e.put("orders/7/total", scope, 9, "120 EUR"), http.StatusNoContent)
	e.wantObject("orders/7/total", scope, 9, "120 EUR")
	if got := e.get("orders/7/total").header.Get(store.HeaderAuditSeq); got != "3" {
		t.Errorf("GET %s = %q, want 3", store.HeaderAuditSeq, got)
	}

	r = e.do(http.MethodHead, "/v1/objects/orders/7/total", nil, nil)
	mustStatus(t, "HEAD", r, http.StatusOK)
	if len(r.body) != 0 || r.header.Get(fencehttp.HeaderToken) != "9" || r.header.Get("Content-Length") != "7" {
		t.Errorf("HEAD: body %q, token %q, length %q", r.body, r.header.Get(fencehttp.HeaderToken), r.header.Get("Content-Length"))
	}

	// An empty value is a value.
	mustStatus(t, "PUT empty", e.put("empty", scope, 9, ""), http.StatusNoContent)
	e.wantObject("empty", scope, 9, "")

	r = e.get("missing")
	mustStatus(t, "GET missing", r, http.StatusNotFound)
	r.problem(t)

	if h := e.highest(scope); h != 9 {
		t.Errorf("Highest = %d, want 9", h)
	}
	recs := e.audit()
	if len(recs) != 4 {
		t.Fatalf("audit has %d records, want 4: %+v", len(recs), recs)
	}
	want := store.AuditRecord{Seq: 3, Scope: scope, Token: 9, HighestBefore: 7, Object: "orders/7/total", Op: store.OpPut, ValueLength: 7}
	got := recs[2]
	got.Time = time.Time{}
	if got != want {
		t.Errorf("audit[2] = %+v, want %+v", got, want)
	}
}

func TestStaleWriteRejected(t *testing.T) {
	e := newEnv(t, store.Config{})
	const scope, name = "orders/7", "orders/7/state"
	mustStatus(t, "PUT 42", e.put(name, scope, 42, "by B"), http.StatusNoContent)
	before := e.audit()

	for _, tc := range []struct {
		name string
		send func() reply
	}{
		{"PUT", func() reply { return e.put(name, scope, 41, "by A") }},
		{"PUT new object", func() reply { return e.put("other", scope, 41, "by A") }},
		{"DELETE", func() reply { return e.del(name, scope, 41) }},
		{"DELETE absent object", func() reply { return e.del("absent", scope, 1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.send()
			mustStatus(t, tc.name, r, http.StatusConflict)
			p := r.problem(t)
			presented := float64(41)
			if tc.name == "DELETE absent object" {
				presented = 1
			}
			for k, want := range map[string]any{
				"type":           fencehttp.ProblemStaleToken,
				"title":          "Stale fencing token",
				"status":         float64(409),
				"scope":          scope,
				"presentedToken": presented,
				"highestToken":   float64(42),
			} {
				if p[k] != want {
					t.Errorf("problem[%q] = %#v, want %#v (body %s)", k, p[k], want, r.body)
				}
			}
			e.wantObject(name, scope, 42, "by B")
			mustStatus(t, "GET other", e.get("other"), http.StatusNotFound)
			if after := e.audit(); len(after) != len(before) {
				t.Errorf("audit grew from %d to %d records", len(before), len(after))
			}
			if h := e.highest(scope); h != 42 {
				t.Errorf("Highest = %d, want 42", h)
			}
		})
	}

	// The same decision through the Go API, as an error callers can branch on.
	_, err := e.s.Put(context.Background(), scope, 41, name, []byte("by A"))
	var st *fence.StaleTokenError
	if !errors.As(err, &st) || !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("Put(41) = %v, want a *fence.StaleTokenError", err)
	}
	if *st != (fence.StaleTokenError{Scope: scope, Presented: 41, Highest: 42}) {
		t.Errorf("StaleTokenError = %+v", *st)
	}
	if n := e.s.RejectionCount(); n != 5 {
		t.Errorf("RejectionCount = %d, want 5", n)
	}

	// Scopes are independent: 41 is fine for another scope.
	mustStatus(t, "PUT other scope", e.put(name, "orders/8", 41, "by C"), http.StatusNoContent)
	e.wantObject(name, "orders/8", 41, "by C")
}

// The store answers fencing header problems exactly like the fencehttp
// middleware: an absent or empty Fencing-Token is missing (428); anything
// else wrong with either header is malformed (400).
func TestMissingFencingHeaders(t *testing.T) {
	e := newEnv(t, store.Config{})
	const scope, name = "s", "obj"
	mustStatus(t, "seed", e.put(name, scope, 10, "v10"), http.StatusNoContent)

	for _, method := range []string{http.MethodPut, http.MethodDelete} {
		for _, tc := range []struct {
			name string
			h    http.Header
		}{
			{"no headers", http.Header{}},
			{"scope only", http.Header{fencehttp.HeaderScope: {scope}}},
			{"empty token", fencing(scope, "")},
			{"empty token and scope", fencing("", "")},
		} {
			t.Run(method+" "+tc.name, func(t *testing.T) {
				r := e.do(method, "/v1/objects/"+name, tc.h, []byte("new"))
				mustStatus(t, tc.name, r, http.StatusPreconditionRequired)
				p := r.problem(t)
				if p["type"] != fencehttp.ProblemMissingToken {
					t.Errorf("type = %v", p["type"])
				}
				e.wantObject(name, scope, 10, "v10")
				if n := len(e.audit()); n != 1 {
					t.Errorf("audit has %d records, want 1", n)
				}
			})
		}
	}
	if _, err := e.s.Put(context.Background(), scope, 0, name, nil); !errors.Is(err, fence.ErrNoToken) {
		t.Errorf("Put(token 0) = %v, want fence.ErrNoToken", err)
	}
}

func TestMalformedFencingHeaders(t *testing.T) {
	e := newEnv(t, store.Config{})
	const scope, name = "s", "obj"
	mustStatus(t, "seed", e.put(name, scope, 10, "v10"), http.StatusNoContent)

	const badToken, badScope = fencehttp.ProblemInvalidToken, fencehttp.ProblemInvalidScope
	tests := []struct {
		name     string
		h        http.Header
		wantType string
		// wire is false for values the HTTP/1.1 parser would normalize or a
		// Go client would refuse to send.
		wire bool
	}{
		{"letters", fencing(scope, "abc"), badToken, true},
		{"negative", fencing(scope, "-1"), badToken, true},
		{"zero", fencing(scope, "0"), badToken, true},
		{"2^64", fencing(scope, "18446744073709551616"), badToken, true},
		{"leading space", fencing(scope, " 5"), badToken, false},
		{"trailing space", fencing(scope, "5 "), badToken, false},
		{"plus sign", fencing(scope, "+5"), badToken, true},
		{"leading zeros", fencing(scope, "0011"), badToken, true},
		{"hex", fencing(scope, "0x10"), badToken, true},
		{"exponent", fencing(scope, "1e3"), badToken, true},
		{"two tokens", http.Header{fencehttp.HeaderScope: {scope}, fencehttp.HeaderToken: {"11", "12"}}, badToken, true},
		{"token only", http.Header{fencehttp.HeaderToken: {"11"}}, badScope, true},
		{"empty scope", fencing("", "11"), badScope, true},
		{"scope too long", fencing(strings.Repeat("k", store.MaxNameBytes+1), "11"), badScope, true},
		{"scope control char", fencing("a\x01b", "11"), badScope, false},
		{"scope tab", fencing("a\tb", "11"), badScope, false},
		{"scope not UTF-8", fencing("a\xffb", "11"), badScope, true},
		{"two scopes", http.Header{fencehttp.HeaderScope: {scope, "t"}, fencehttp.HeaderToken: {"11"}}, badScope, true},
	}
	for _, method := range []string{http.MethodPut, http.MethodDelete} {
		for _, tt := range tests {
			t.Run(method+" "+tt.name, func(t *testing.T) {
				send := []func(string, string, http.Header, []byte) reply{e.serve}
				if tt.wire {
					send = append(send, e.do)
				}
				for _, do := range send {
					r := do(method, "/v1/objects/"+name, tt.h, []byte("new"))
					mustStatus(t, tt.name, r, http.StatusBadRequest)
					if p := r.problem(t); p["type"] != tt.wantType {
						t.Errorf("type = %v, want %s", p["type"], tt.wantType)
					}
				}
				e.wantObject(name, scope, 10, "v10")
				if n := len(e.audit()); n != 1 {
					t.Errorf("audit has %d records, want 1", n)
				}
				if h := e.highest(scope); h != 10 {
					t.Errorf("Highest = %d, want 10", h)
				}
			})
		}
	}

	// The largest token is well-formed.
	mustStatus(t, "max token", e.serve(http.MethodPut, "/v1/objects/"+name, fencing(scope, "18446744073709551615"), []byte("max")), http.StatusNoContent)
	e.wantObject(name, scope, 1<<64-1, "max")
}

func TestDelete(t *testing.T) {
	e := newEnv(t, store.Config{})
	const scope, name = "s", "obj"
	mustStatus(t, "seed", e.put(name, scope, 10, "v10"), http.StatusNoContent)

	r := e.del(name, scope, 11)
	mustStatus(t, "DELETE", r, http.StatusNoContent)
	if got := r.header.Get(store.HeaderAuditSeq); got != "2" {
		t.Errorf("DELETE %s = %q, want 2", store.HeaderAuditSeq, got)
	}
	mustStatus(t, "GET deleted", e.get(name), http.StatusNotFound)
	recs := e.audit()
	if len(recs) != 2 || recs[1].Op != store.OpDelete || recs[1].Token != 11 || recs[1].ValueLength != 0 || recs[1].Object != name {
		t.Fatalf("audit = %+v, want a delete with token 11 last", recs)
	}

	// Deleting an absent object records nothing, not even its token.
	r = e.del(name, scope, 50)
	mustStatus(t, "DELETE absent", r, http.StatusNotFound)
	r.problem(t)
	if h := e.highest(scope); h != 11 {
		t.Errorf("Highest after DELETE of absent object = %d, want 11", h)
	}
	if n := len(e.audit()); n != 2 {
		t.Errorf("audit has %d records, want 2", n)
	}
	if _, err := e.s.Delete(context.Background(), scope, 50, name); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Delete absent = %v, want ErrNotFound", err)
	}
	mustStatus(t, "PUT 20 after absent DELETE 50", e.put(name, scope, 20, "v20"), http.StatusNoContent)
	e.wantObject(name, scope, 20, "v20")

	// A stale delete leaves the object.
	mustStatus(t, "stale DELETE", e.del(name, scope, 19), http.StatusConflict)
	e.wantObject(name, scope, 20, "v20")
}

func TestObjectNames(t *testing.T) {
	e := newEnv(t, store.Config{})
	h := fencing("s", "1")

	for _, tc := range []struct{ name, path string }{
		{"empty", "/v1/objects/"},
		{"control char", "/v1/objects/a%01b"},
		{"NUL", "/v1/objects/a%00b"},
		{"not UTF-8", "/v1/objects/a%FFb"},
		{"too long", "/v1/objects/" + strings.Repeat("n", store.MaxNameBytes+1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, method := range []string{http.MethodPut, http.MethodGet, http.MethodDelete} {
				r := e.do(method, tc.path, h, []byte("v"))
				mustStatus(t, method+" "+tc.path, r, http.StatusBadRequest)
				r.problem(t)
			}
		})
	}
	if n := len(e.audit()); n != 0 {
		t.Fatalf("invalid names wrote %d audit records", n)
	}

	// Names are taken literally: slashes, dots and escapes are not cleaned.
	for _, tc := range []struct{ path, name string }{
		{"a/../b", "a/../b"},
		{"a//b/.", "a//b/."},
		{"sp%20ace", "sp ace"},
		{"pct%2Fslash", "pct/slash"},
		{"caf%C3%A9", "café"},
		{strings.Repeat("n", store.MaxNameBytes), strings.Repeat("n", store.MaxNameBytes)},
	} {
		r := e.put(tc.path, "s", 1, "v:"+tc.name)
		mustStatus(t, "PUT "+tc.path, r, http.StatusNoContent)
		obj, err := e.s.Get(context.Background(), tc.name)
		if err != nil || string(obj.Value) != "v:"+tc.name {
			t.Errorf("Get(%q) = %q, %v; want the value PUT at %s", tc.name, obj.Value, err, tc.path)
		}
	}
	mustStatus(t, "cleaned path is another object", e.get("b"), http.StatusNotFound)

	r := e.do(http.MethodPost, "/v1/objects/x", h, []byte("v"))
	mustStatus(t, "POST", r, http.StatusMethodNotAllowed)
	if allow := r.header.Get("Allow"); allow == "" {
		t.Error("405 without Allow header")
	}
}

func TestValueTooLarge(t *testing.T) {
	const limit = 16
	e := newEnv(t, store.Config{MaxValueBytes: limit})
	mustStatus(t, "seed", e.put("obj", "s", 1, "v1"), http.StatusNoContent)

	big := bytes.Repeat([]byte("x"), limit+1)
	r := e.do(http.MethodPut, "/v1/objects/obj", fencing("s", "2"), big)
	mustStatus(t, "PUT with Content-Length", r, http.StatusRequestEntityTooLarge)
	r.problem(t)

	// Without Content-Length the limit is enforced while reading.
	req, err := http.NewRequest(http.MethodPut, e.srv.URL+"/v1/objects/obj", io.MultiReader(bytes.NewReader(big)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = fencing("s", "2")
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || req.ContentLength != 0 {
		t.Errorf("chunked PUT: status %d (Content-Length %d), want 413 without a length", resp.StatusCode, req.ContentLength)
	}

	if _, err := e.s.Put(context.Background(), "s", 2, "obj", big); !errors.Is(err, store.ErrTooLarge) {
		t.Errorf("Put(big) = %v, want ErrTooLarge", err)
	}
	e.wantObject("obj", "s", 1, "v1")
	if h := e.highest("s"); h != 1 {
		t.Errorf("Highest = %d, want 1", h)
	}

	mustStatus(t, "PUT at the limit", e.put("obj", "s", 2, string(big[:limit])), http.StatusNoContent)
	e.wantObject("obj", "s", 2, string(big[:limit]))
}

func TestNoFencingAcceptsStale(t *testing.T) {
	e := newEnv(t, store.Config{NoFencing: true})
	const scope, name = "orders/7", "orders/7/state"
	mustStatus(t, "PUT 42", e.put(name, scope, 42, "by B"), http.StatusNoContent)
	mustStatus(t, "PUT 41", e.put(name, scope, 41, "by A"), http.StatusNoContent)
	e.wantObject(name, scope, 41, "by A")
	if h := e.highest(scope); h != 42 {
		t.Errorf("Highest = %d, want 42 (never lowered)", h)
	}
	mustStatus(t, "DELETE 40", e.del(name, scope, 40), http.StatusNoContent)

	recs := e.audit()
	var tokens []uint64
	var stale []bool
	for _, r := range recs {
		tokens = append(tokens, r.Token)
		stale = append(stale, r.Stale())
	}
	if len(recs) != 3 || tokens[0] != 42 || tokens[1] != 41 || tokens[2] != 40 ||
		stale[0] || !stale[1] || !stale[2] || recs[1].HighestBefore != 42 {
		t.Fatalf("audit tokens %v stale %v, want [42 41 40] [false true true]: %+v", tokens, stale, recs)
	}

	// The headers are still required and checked.
	mustStatus(t, "missing token", e.do(http.MethodPut, "/v1/objects/"+name, http.Header{}, []byte("x")), http.StatusPreconditionRequired)
	mustStatus(t, "malformed token", e.do(http.MethodPut, "/v1/objects/"+name, fencing(scope, "x"), []byte("x")), http.StatusBadRequest)
	if n := e.s.RejectionCount(); n != 0 {
		t.Errorf("RejectionCount = %d, want 0", n)
	}
}

func TestAuditEndpoint(t *testing.T) {
	e := newEnv(t, store.Config{})
	for i := range 5 {
		mustStatus(t, "PUT", e.put("obj", "s", uint64(i+1), strings.Repeat("v", i)), http.StatusNoContent)
	}
	mustStatus(t, "stale", e.put("obj", "s", 1, "late"), http.StatusConflict)

	page := func(query string) store.AuditPage {
		t.Helper()
		r := e.do(http.MethodGet, "/v1/audit"+query, nil, nil)
		mustStatus(t, "GET /v1/audit"+query, r, http.StatusOK)
		var p store.AuditPage
		if err := json.Unmarshal(r.body, &p); err != nil {
			t.Fatalf("decode %s: %v", r.body, err)
		}
		return p
	}
	all := page("")
	want := e.audit()
	if len(all.Records) != 5 || all.Next != 5 {
		t.Fatalf("GET /v1/audit = %+v", all)
	}
	for i := range want {
		if !all.Records[i].Time.Equal(want[i].Time) {
			t.Errorf("record %d time %v != %v", i, all.Records[i].Time, want[i].Time)
		}
		all.Records[i].Time, want[i].Time = time.Time{}, time.Time{}
		if all.Records[i] != want[i] || want[i].Seq != uint64(i+1) || want[i].ValueLength != int64(i) {
			t.Errorf("record %d = %+v, Audit() has %+v", i, all.Records[i], want[i])
		}
	}

	// Paging with after and limit sees every record once.
	var seqs []uint64
	for after := uint64(0); ; {
		p := page("?after=" + tok(after) + "&limit=2")
		if len(p.Records) == 0 {
			if p.Next != after {
				t.Errorf("empty page Next = %d, want %d", p.Next, after)
			}
			break
		}
		for _, r := range p.Records {
			seqs = append(seqs, r.Seq)
		}
		after = p.Next
	}
	if len(seqs) != 5 || seqs[0] != 1 || seqs[4] != 5 {
		t.Errorf("paged seqs = %v", seqs)
	}
	if r := page("?after=99"); r.Records == nil || len(r.Records) != 0 {
		t.Errorf("after the end: %+v, want an empty array", r)
	}

	for _, q := range []string{"?after=-1", "?after=x", "?limit=0", "?limit=10001", "?limit=x"} {
		r := e.do(http.MethodGet, "/v1/audit"+q, nil, nil)
		mustStatus(t, "GET /v1/audit"+q, r, http.StatusBadRequest)
		r.problem(t)
	}
}

// syncBuffer collects log output written from handler goroutines.
type syncBuffer struct{ testutil.SyncBuffer }

func (s *syncBuffer) records(t *testing.T) []map[string]any {
	var out []map[string]any
	dec := json.NewDecoder(strings.NewReader(s.String()))
	for dec.More() {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("log line: %v", err)
		}
		out = append(out, m)
	}
	return out
}

func TestRejectionsLoggedAndListed(t *testing.T) {
	var logs syncBuffer
	var mu sync.Mutex
	var decisions []fence.Decision
	e := newEnv(t, store.Config{
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
		Observer: fence.ObserverFunc(func(_ context.Context, d fence.Decision) {
			mu.Lock()
			defer mu.Unlock()
			decisions = append(decisions, d)
		}),
	})
	const scope = "<b>orders/7</b>"
	mustStatus(t, "PUT 42", e.put("obj", scope, 42, "v"), http.StatusNoContent)
	mustStatus(t, "PUT 41", e.put("obj", scope, 41, "v"), http.StatusConflict)
	mustStatus(t, "DELETE 40", e.del("obj", scope, 40), http.StatusConflict)

	var stale []map[string]any
	for _, r := range logs.records(t) {
		if r["msg"] == "stale fencing token rejected" {
			stale = append(stale, r)
		}
	}
	if len(stale) != 2 {
		t.Fatalf("got %d stale rejection log records, want 2: %+v", len(stale), logs.records(t))
	}
	for i, want := range []map[string]any{
		{"level": "WARN", "scope": scope, "presented_token": float64(41), "highest_token": float64(42), "rejections": float64(1), "object": "obj", "op": "put"},
		{"level": "WARN", "scope": scope, "presented_token": float64(40), "highest_token": float64(42), "rejections": float64(2), "object": "obj", "op": "delete"},
	} {
		for k, v := range want {
			if stale[i][k] != v {
				t.Errorf("log record %d: %s = %#v, want %#v", i, k, stale[i][k], v)
			}
		}
	}

	mu.Lock()
	got := append([]fence.Decision(nil), decisions...)
	mu.Unlock()
	wantDecisions := []fence.Decision{
		{Scope: scope, Presented: 42, Highest: 0, Accepted: true},
		{Scope: scope, Presented: 41, Highest: 42, Accepted: false},
		{Scope: scope, Presented: 40, Highest: 42, Accepted: false},
	}
	if len(got) != len(wantDecisions) {
		t.Fatalf("observer saw %+v, want %+v", got, wantDecisions)
	}
	for i := range got {
		if got[i] != wantDecisions[i] {
			t.Errorf("decision %d = %+v, want %+v", i, got[i], wantDecisions[i])
		}
	}

	r := e.do(http.MethodGet, "/rejections", nil, nil)
	mustStatus(t, "GET /rejections", r, http.StatusOK)
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Errorf("Content-Type = %q", ct)
	}
	page := string(r.body)
	for _, want := range []string{`name="viewport"`, "2 rejected", "&lt;b&gt;orders/7&lt;/b&gt;", "<td class=\"n\">41</td>", "<td class=\"n\">40</td>"} {
		if !strings.Contains(page, want) {
			t.Errorf("rejections page lacks %q:\n%s", want, page)
		}
	}
	if strings.Contains(page, "<b>orders") || strings.Contains(page, "http://") || strings.Contains(page, "https://") {
		t.Errorf("rejections page has unescaped input or external references:\n%s", page)
	}

	// Only the newest 100 are kept, newest first.
	if _, err := e.s.Put(context.Background(), scope, 1000, "obj", nil); err != nil {
		t.Fatal(err)
	}
	for i := range 150 {
		if _, err := e.s.Put(context.Background(), scope, uint64(i+1), "obj", nil); !errors.Is(err, fence.ErrStaleToken) {
			t.Fatalf("Put(%d) = %v, want stale", i+1, err)
		}
	}
	r = e.do(http.MethodGet, "/v1/rejections", nil, nil)
	mustStatus(t, "GET /v1/rejections", r, http.StatusOK)
	var list store.RejectionsPage
	if err := json.Unmarshal(r.body, &list); err != nil {
		t.Fatal(err)
	}
	if list.Count != 152 || len(list.Recent) != 100 || list.Recent[0].Presented != 150 || list.Recent[99].Presented != 51 {
		t.Errorf("rejections: count %d, %d recent, first %+v", list.Count, len(list.Recent), list.Recent[:1])
	}
}

func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue metric
				}
			}
			return metricValue(m)
		}
	}
	t.Fatalf("metric %s%v not found", name, labels)
	return 0
}

func metricValue(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetHistogram() != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return m.GetGauge().GetValue()
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newEnv(t, store.Config{Registerer: reg})
	mustStatus(t, "PUT 5", e.put("obj", "s", 5, "v"), http.StatusNoContent)
	mustStatus(t, "PUT 6", e.put("obj", "s", 6, "v"), http.StatusNoContent)
	mustStatus(t, "stale PUT", e.put("obj", "s", 2, "v"), http.StatusConflict)
	mustStatus(t, "missing", e.do(http.MethodPut, "/v1/objects/obj", nil, nil), http.StatusPreconditionRequired)
	mustStatus(t, "malformed", e.do(http.MethodDelete, "/v1/objects/obj", fencing("s", "x"), nil), http.StatusBadRequest)
	mustStatus(t, "DELETE", e.del("obj", "s", 6), http.StatusNoContent)
	mustStatus(t, "bad name", e.put("bad%01name", "s", 7, "v"), http.StatusBadRequest)
	mustStatus(t, "GET bad name", e.get("bad%01name"), http.StatusBadRequest)

	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"fenced_store_writes_accepted_total", map[string]string{"op": "put"}, 2},
		{"fenced_store_writes_accepted_total", map[string]string{"op": "delete"}, 1},
		{"fenced_store_writes_rejected_total", map[string]string{"op": "put", "reason": "stale"}, 1},
		{"fenced_store_writes_rejected_total", map[string]string{"op": "put", "reason": "missing_token"}, 1},
		{"fenced_store_writes_rejected_total", map[string]string{"op": "delete", "reason": "malformed"}, 1},
		{"fenced_store_writes_rejected_total", map[string]string{"op": "delete", "reason": "stale"}, 0},
		{"fenced_store_writes_rejected_total", map[string]string{"op": "put", "reason": "malformed"}, 1},
		{"fenced_store_stale_token_gap", nil, 1},
		{"fenced_store_stale_writes_accepted_total", nil, 0},
		{"fenced_store_write_duration_seconds", nil, 3},
	} {
		if got := counterValue(t, reg, tc.name, tc.labels); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}

	r := e.do(http.MethodGet, "/metrics", nil, nil)
	mustStatus(t, "GET /metrics", r, http.StatusOK)
	if !strings.Contains(string(r.body), `fenced_store_writes_rejected_total{op="put",reason="stale"} 1`) {
		t.Errorf("/metrics lacks the stale counter:\n%s", r.body)
	}
	if strings.Contains(string(r.body), `scope=`) {
		t.Error("/metrics has a per-scope label")
	}
}

func TestDefaultRegistryServesMetrics(t *testing.T) {
	s, err := store.Open(store.Config{DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	e := &env{t: t, s: s}
	r := e.serve(http.MethodGet, "/metrics", nil, nil)
	mustStatus(t, "GET /metrics", r, http.StatusOK)
	for _, want := range []string{"fenced_store_writes_accepted_total", "go_goroutines"} {
		if !strings.Contains(string(r.body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestHealthzAndClose(t *testing.T) {
	e := newEnv(t, store.Config{})
	r := e.do(http.MethodGet, "/healthz", nil, nil)
	mustStatus(t, "healthz", r, http.StatusOK)
	if err := e.s.Close(); err != nil {
		t.Fatal(err)
	}
	mustStatus(t, "healthz after Close", e.do(http.MethodGet, "/healthz", nil, nil), http.StatusServiceUnavailable)
	mustStatus(t, "PUT after Close", e.put("obj", "s", 1, "v"), http.StatusServiceUnavailable)
	if _, err := e.s.Get(context.Background(), "obj"); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Get after Close = %v, want ErrClosed", err)
	}
}

func TestReopenKeepsState(t *testing.T) {
	dir := t.TempDir()
	cfg := store.Config{DataDir: dir, Logger: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry()}
	s, err := store.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Put(ctx, "s", 42, "obj", []byte("v42")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	cfg.Registerer = prometheus.NewRegistry()
	s, err = store.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Put(ctx, "s", 41, "obj", []byte("v41")); !errors.Is(err, fence.ErrStaleToken) {
		t.Errorf("Put(41) after reopen = %v, want stale", err)
	}
	obj, err := s.Get(ctx, "obj")
	if err != nil || string(obj.Value) != "v42" || obj.Token != 42 || obj.Scope != "s" || obj.Seq != 1 {
		t.Errorf("Get after reopen = %+v, %v", obj, err)
	}
	rec, err := s.Put(ctx, "s", 42, "obj", []byte("again"))
	if err != nil || rec.Seq != 2 {
		t.Errorf("Put(42) after reopen = %+v, %v; want seq 2", rec, err)
	}
}

func TestAuditTimeFromConfig(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	e := newEnv(t, store.Config{Now: func() time.Time { return at }})
	mustStatus(t, "PUT", e.put("obj", "s", 1, "v"), http.StatusNoContent)
	if recs := e.audit(); len(recs) != 1 || !recs[0].Time.Equal(at) {
		t.Errorf("audit = %+v, want time %v", recs, at)
	}
	r := e.get("obj")
	if got := r.header.Get("Last-Modified"); got != at.Format(http.TimeFormat) {
		t.Errorf("Last-Modified = %q", got)
	}
	if n, err := strconv.Atoi(r.header.Get("Content-Length")); err != nil || n != 1 {
		t.Errorf("Content-Length = %q", r.header.Get("Content-Length"))
	}
}
