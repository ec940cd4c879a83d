package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/internal/fencedtest"
	"github.com/fencedio/fenced/internal/testutil"
	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The tests in this file speak the wire contract of docs/protocol.md over
// real HTTP, mostly as raw JSON so that field names and encodings are pinned,
// not just whatever the generated code happens to accept.

const servicePath = "/fenced.v1.LeaseService/"

// jsonU64 and jsonI64 decode proto3 JSON 64-bit integers, which may be
// written as strings or as numbers.
type jsonU64 uint64

func (n *jsonU64) UnmarshalJSON(b []byte) error {
	v, err := strconv.ParseUint(strings.Trim(string(b), `"`), 10, 64)
	*n = jsonU64(v)
	return err
}

type jsonI64 int64

func (n *jsonI64) UnmarshalJSON(b []byte) error {
	v, err := strconv.ParseInt(strings.Trim(string(b), `"`), 10, 64)
	*n = jsonI64(v)
	return err
}

// wireLease is the JSON shape of fenced.v1.Lease. Decoding is strict, so a
// renamed or added field fails the tests.
type wireLease struct {
	Key         string  `json:"key"`
	LeaseID     string  `json:"leaseId"`
	Owner       string  `json:"owner"`
	Token       jsonU64 `json:"token"`
	TTLMs       jsonI64 `json:"ttlMs"`
	RemainingMs jsonI64 `json:"remainingMs"`
}

// same reports whether public, the lease as Get or List show it to anyone,
// is the ownership epoch held shows its holder. Only the holder sees the
// lease ID: the public view must leave it out.
func (public wireLease) same(held wireLease) bool {
	return public.LeaseID == "" && public.Key == held.Key && public.Owner == held.Owner &&
		public.Token == held.Token && public.TTLMs == held.TTLMs
}

type leaseResp struct {
	Lease *wireLease `json:"lease"`
}

type getResp struct {
	Lease     *wireLease `json:"lease"`
	LastToken jsonU64    `json:"lastToken"`
	Revision  jsonU64    `json:"revision"`
}

type listResp struct {
	Leases   []wireLease `json:"leases"`
	Revision jsonU64     `json:"revision"`
}

type wireDetail struct {
	Type  string          `json:"type"`
	Value string          `json:"value"`
	Debug json.RawMessage `json:"debug"`
}

type wireError struct {
	Code    string       `json:"code"`
	Message string       `json:"message"`
	Details []wireDetail `json:"details"`
}

// leaseHeld decodes the LeaseHeld detail of a failed_precondition answer.
func (e wireError) leaseHeld(t *testing.T) *fencedv1.LeaseHeld {
	t.Helper()
	for _, d := range e.Details {
		if d.Type != "fenced.v1.LeaseHeld" {
			continue
		}
		b, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(d.Value, "="))
		if err != nil {
			t.Fatalf("detail value %q: %v", d.Value, err)
		}
		var held fencedv1.LeaseHeld
		if err := proto.Unmarshal(b, &held); err != nil {
			t.Fatalf("detail value: %v", err)
		}
		// The debug rendering must agree with the binary value.
		if len(d.Debug) > 0 {
			var dbg struct {
				Key         string  `json:"key"`
				Owner       string  `json:"owner"`
				Token       jsonU64 `json:"token"`
				RemainingMs jsonI64 `json:"remainingMs"`
			}
			if err := strictDecode(d.Debug, &dbg); err != nil {
				t.Fatalf("detail debug %s: %v", d.Debug, err)
			}
			if dbg.Owner != held.Owner || uint64(dbg.Token) != held.Token || dbg.Key != held.Key {
				t.Fatalf("detail debug %s disagrees with value %v", d.Debug, &held)
			}
		}
		return &held
	}
	t.Fatalf("no fenced.v1.LeaseHeld detail in %+v", e)
	return nil
}

// connectHTTPStatus is the HTTP status the Connect protocol uses per code.
var connectHTTPStatus = map[string]int{
	"invalid_argument":    http.StatusBadRequest,
	"failed_precondition": http.StatusBadRequest,
	"not_found":           http.StatusNotFound,
	"resource_exhausted":  http.StatusTooManyRequests,
	"unavailable":         http.StatusServiceUnavailable,
	"unimplemented":       http.StatusNotImplemented,
}

func strictDecode(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}

// api is a raw HTTP client of one server.
type api struct {
	t    *testing.T
	base string
	hc   *http.Client
}

func newAPI(t *testing.T, base string) *api {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &api{t: t, base: base, hc: &http.Client{Transport: tr, Timeout: 20 * time.Second}}
}

// do sends one request; body is raw JSON when it is a string or []byte and
// is marshalled otherwise.
func (a *api) do(httpMethod, path, contentType string, body any) (int, http.Header, []byte) {
	a.t.Helper()
	var raw []byte
	switch b := body.(type) {
	case nil:
	case string:
		raw = []byte(b)
	case []byte:
		raw = b
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			a.t.Fatalf("marshal: %v", err)
		}
	}
	req, err := http.NewRequest(httpMethod, a.base+path, bytes.NewReader(raw))
	if err != nil {
		a.t.Fatalf("request: %v", err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", httpMethod, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		a.t.Fatalf("%s %s: read body: %v", httpMethod, path, err)
	}
	return resp.StatusCode, resp.Header, out
}

func (a *api) post(method string, body any) (int, []byte) {
	a.t.Helper()
	status, _, out := a.do(http.MethodPost, servicePath+method, "application/json", body)
	return status, out
}

// ok calls method, requires a 200 and decodes the answer strictly into out.
func (a *api) ok(method string, body, out any) {
	a.t.Helper()
	status, hdr, raw := a.do(http.MethodPost, servicePath+method, "application/json", body)
	if status != http.StatusOK {
		a.t.Fatalf("%s %v: HTTP %d %s", method, body, status, raw)
	}
	if ct := hdr.Get("Content-Type"); ct != "application/json" {
		a.t.Fatalf("%s: Content-Type %q", method, ct)
	}
	if err := strictDecode(raw, out); err != nil {
		a.t.Fatalf("%s: decode %s: %v", method, raw, err)
	}
}

// fail calls method and requires the Connect error code, with the HTTP
// status the Connect protocol gives it and a non-empty message.
func (a *api) fail(method string, body any, code string) wireError {
	a.t.Helper()
	status, raw := a.post(method, body)
	return a.checkError(method, status, raw, code)
}

func (a *api) checkError(what string, status int, raw []byte, code string) wireError {
	a.t.Helper()
	var e wireError
	if err := strictDecode(raw, &e); err != nil {
		a.t.Fatalf("%s: HTTP %d, error body %q: %v", what, status, raw, err)
	}
	if e.Code != code || status != connectHTTPStatus[code] {
		a.t.Fatalf("%s: HTTP %d code %q (%s), want HTTP %d code %q", what, status, e.Code, e.Message, connectHTTPStatus[code], code)
	}
	if strings.TrimSpace(e.Message) == "" {
		a.t.Fatalf("%s: %s without a message", what, code)
	}
	return e
}

func (a *api) acquire(key, owner string, ttlMs int64) wireLease {
	a.t.Helper()
	var r leaseResp
	a.ok("Acquire", map[string]any{"key": key, "owner": owner, "ttlMs": ttlMs}, &r)
	if r.Lease == nil {
		a.t.Fatalf("Acquire %q: no lease in the answer", key)
	}
	return *r.Lease
}

func (a *api) renew(key, id string) wireLease {
	a.t.Helper()
	var r leaseResp
	a.ok("Renew", map[string]any{"key": key, "leaseId": id}, &r)
	if r.Lease == nil {
		a.t.Fatalf("Renew %q: no lease in the answer", key)
	}
	return *r.Lease
}

func (a *api) release(key, id string) {
	a.t.Helper()
	var r struct{}
	a.ok("Release", map[string]any{"key": key, "leaseId": id}, &r)
}

func (a *api) get(key string) getResp {
	a.t.Helper()
	var r getResp
	a.ok("Get", map[string]any{"key": key}, &r)
	return r
}

func (a *api) list(prefix string, limit int) []wireLease {
	a.t.Helper()
	var r listResp
	a.ok("List", map[string]any{"prefix": prefix, "limit": limit}, &r)
	return r.Leases
}

// metric returns the value of an unlabelled sample, or of the sample with
// the given label set, e.g. `fenced_releases_total{result="released"}`.
func (a *api) metric(series string) float64 {
	a.t.Helper()
	status, _, body := a.do(http.MethodGet, "/metrics", "", nil)
	if status != http.StatusOK {
		a.t.Fatalf("/metrics: HTTP %d", status)
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if ok && name == series {
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				a.t.Fatalf("/metrics: %q: %v", sc.Text(), err)
			}
			return v
		}
	}
	a.t.Fatalf("/metrics has no sample %s", series)
	return 0
}

// awaitMetric polls /metrics until series has the value want.
func (a *api) awaitMetric(series string, want float64) {
	a.t.Helper()
	testutil.Eventually(a.t, 10*time.Second, func() error {
		if got := a.metric(series); got != want {
			return fmt.Errorf("%s is %v, want %v", series, got, want)
		}
		return nil
	})
}

var leaseIDPattern = regexp.MustCompile(`^[0-9a-f]{32,}$`)

func checkLease(t *testing.T, l wireLease, key, owner string, ttlMs int64) {
	t.Helper()
	if l.Key != key || l.Owner != owner || int64(l.TTLMs) != ttlMs {
		t.Fatalf("lease %+v, want key %q owner %q ttlMs %d", l, key, owner, ttlMs)
	}
	if !leaseIDPattern.MatchString(l.LeaseID) {
		t.Fatalf("leaseId %q is not at least 128 bits of hex", l.LeaseID)
	}
	if l.Token == 0 {
		t.Fatalf("lease %+v has token 0", l)
	}
	if l.RemainingMs < 0 || int64(l.RemainingMs) > ttlMs {
		t.Fatalf("lease %+v: remainingMs outside 0..ttlMs", l)
	}
}

func TestAcquireJSONShape(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	a := newAPI(t, srv.URL)

	// A literal curl-style body, 64-bit integers as strings and as numbers.
	var granted []wireLease
	for i, body := range []string{
		`{"key":"shape/a","owner":"alice","ttlMs":"5000"}`,
		`{"key":"shape/b","owner":"alice","ttlMs":5000,"waitMs":0}`,
	} {
		status, raw := a.post("Acquire", body)
		if status != http.StatusOK {
			t.Fatalf("Acquire %s: HTTP %d %s", body, status, raw)
		}
		// Pin the outer shape exactly: one field, "lease".
		var outer map[string]json.RawMessage
		if err := json.Unmarshal(raw, &outer); err != nil {
			t.Fatal(err)
		}
		if len(outer) != 1 || outer["lease"] == nil {
			t.Fatalf("Acquire answered %s, want {\"lease\":{...}}", raw)
		}
		var r leaseResp
		if err := strictDecode(raw, &r); err != nil {
			t.Fatalf("decode %s: %v", raw, err)
		}
		checkLease(t, *r.Lease, []string{"shape/a", "shape/b"}[i], "alice", 5000)
		granted = append(granted, *r.Lease)
		// Token and ttlMs are 64-bit: proto3 JSON writes them as strings.
		var fields map[string]any
		json.Unmarshal(outer["lease"], &fields)
		for _, f := range []string{"key", "leaseId", "owner", "token", "ttlMs"} {
			if _, ok := fields[f]; !ok {
				t.Fatalf("lease %s has no field %q", outer["lease"], f)
			}
		}
	}
	a1, b1 := granted[0], granted[1]
	if a1.LeaseID == b1.LeaseID || a1.Token == b1.Token {
		t.Fatalf("two grants share an id or token: %+v %+v", a1, b1)
	}
}

func TestAcquireHeld(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	a := newAPI(t, srv.URL)
	holder := a.acquire("held/k", "alice", 30_000)

	e := a.fail("Acquire", map[string]any{"key": "held/k", "owner": "bob", "ttlMs": 5000}, "failed_precondition")
	held := e.leaseHeld(t)
	if held.GetOwner() != "alice" || held.GetToken() != uint64(holder.Token) || held.GetKey() != "held/k" {
		t.Fatalf("LeaseHeld %v, want owner alice token %d", held, holder.Token)
	}
	if rem := held.GetRemainingMs(); rem <= 0 || rem > 30_000 {
		t.Fatalf("LeaseHeld remainingMs %d, want in (0, 30000]", rem)
	}
	if len(e.Details[0].Debug) == 0 {
		t.Errorf("LeaseHeld detail has no debug rendering for curl users")
	}
	// The holder is untouched.
	if g := a.get("held/k"); g.Lease == nil || !g.Lease.same(holder) {
		t.Fatalf("after a refused acquire Get = %+v, want %+v", g.Lease, holder)
	}
	// The same owner name does not grant re-entry either.
	a.fail("Acquire", map[string]any{"key": "held/k", "owner": "alice", "ttlMs": 5000}, "failed_precondition")
}

func TestRenew(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	a := newAPI(t, srv.URL)
	l := a.acquire("renew/k", "alice", 10_000)
	other := a.acquire("renew/other", "bob", 10_000)

	r := a.renew("renew/k", l.LeaseID)
	if r.LeaseID != l.LeaseID || r.Key != l.Key || r.Owner != l.Owner || r.Token != l.Token || r.TTLMs != l.TTLMs {
		t.Fatalf("Renew answered %+v, want the same lease %+v", r, l)
	}
	if r.RemainingMs <= 0 || r.RemainingMs > 10_000 {
		t.Fatalf("Renew remainingMs %d", r.RemainingMs)
	}

	released := a.acquire("renew/released", "carol", 10_000)
	a.release("renew/released", released.LeaseID)
	// The next holder of a key: the previous holder's id must not renew it.
	next := a.acquire("renew/released", "dave", 10_000)

	for _, tc := range []struct {
		name, key, id string
	}{
		{"unknown id", "renew/k", hex.EncodeToString(bytes.Repeat([]byte{0xab}, 16))},
		{"unknown key", "renew/nobody", l.LeaseID},
		{"released lease", "renew/released", released.LeaseID},
		{"another holder's id", "renew/k", other.LeaseID},
		{"own id on another key", "renew/other", l.LeaseID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAPI(t, srv.URL)
			a.fail("Renew", map[string]any{"key": tc.key, "leaseId": tc.id}, "not_found")
		})
	}
	// Nothing above disturbed the current holders.
	for _, want := range []wireLease{l, other, next} {
		if g := a.get(want.Key); g.Lease == nil || !g.Lease.same(want) {
			t.Fatalf("Get %q = %+v, want %+v", want.Key, g.Lease, want)
		}
		if r := a.renew(want.Key, want.LeaseID); r.Token != want.Token {
			t.Fatalf("Renew %q token %d, want %d", want.Key, r.Token, want.Token)
		}
	}
}

func TestRelease(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	a := newAPI(t, srv.URL)
	l := a.acquire("release/k", "alice", 10_000)
	other := a.acquire("release/other", "bob", 10_000)

	a.fail("Release", map[string]any{"key": "release/k", "leaseId": other.LeaseID}, "not_found")
	a.fail("Release", map[string]any{"key": "release/k", "leaseId": strings.Repeat("0", 32)}, "not_found")
	a.fail("Release", map[string]any{"key": "release/free", "leaseId": l.LeaseID}, "not_found")
	if g := a.get("release/k"); g.Lease == nil || !g.Lease.same(l) {
		t.Fatalf("a refused release changed the lease: %+v, want %+v", g.Lease, l)
	}

	// Release answers exactly {}.
	status, raw := a.post("Release", map[string]any{"key": "release/k", "leaseId": l.LeaseID})
	if status != http.StatusOK || strings.TrimSpace(string(raw)) != "{}" {
		t.Fatalf("Release: HTTP %d %s, want 200 {}", status, raw)
	}
	if g := a.get("release/k"); g.Lease != nil || uint64(g.LastToken) != uint64(l.Token) {
		t.Fatalf("after release Get = %+v lastToken %d, want no lease, lastToken %d", g.Lease, g.LastToken, l.Token)
	}
	// Releasing twice is not_found: the lease is no longer current.
	a.fail("Release", map[string]any{"key": "release/k", "leaseId": l.LeaseID}, "not_found")
	if got := a.metric(`fenced_releases_total{result="released"}`); got != 1 {
		t.Errorf(`fenced_releases_total{result="released"} = %v, want 1`, got)
	}
	if got := a.metric(`fenced_releases_total{result="not_found"}`); got != 4 {
		t.Errorf(`fenced_releases_total{result="not_found"} = %v, want 4`, got)
	}
}

func TestGet(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	a := newAPI(t, srv.URL)

	// A key never used: no lease, lastToken 0 (proto3 JSON omits it).
	status, raw := a.post("Get", `{"key":"get/never"}`)
	if status != http.StatusOK {
		t.Fatalf("Get: HTTP %d %s", status, raw)
	}
	var fresh getResp
	if err := strictDecode(raw, &fresh); err != nil || fresh.Lease != nil || fresh.LastToken != 0 {
		t.Fatalf("Get of an unused key answered %s (%v)", raw, err)
	}

	l := a.acquire("get/k", "alice", 10_000)
	status, raw = a.post("Get", `{"key":"get/k"}`)
	var outer map[string]json.RawMessage
	if status != http.StatusOK || json.Unmarshal(raw, &outer) != nil || outer["lease"] == nil || outer["lastToken"] == nil {
		t.Fatalf("Get of a held key answered HTTP %d %s, want lease and lastToken", status, raw)
	}
	g := a.get("get/k")
	if g.Lease == nil || !g.Lease.same(l) || uint64(g.LastToken) != uint64(l.Token) {
		t.Fatalf("Get = %+v lastToken %d, want %+v lastToken %d", g.Lease, g.LastToken, l, l.Token)
	}

	a.release("get/k", l.LeaseID)
	status, raw = a.post("Get", `{"key":"get/k"}`)
	outer = nil
	if status != http.StatusOK || json.Unmarshal(raw, &outer) != nil || outer["lease"] != nil || outer["lastToken"] == nil {
		t.Fatalf("Get of a freed key answered HTTP %d %s, want lastToken without lease", status, raw)
	}
	if g := a.get("get/k"); uint64(g.LastToken) != uint64(l.Token) {
		t.Fatalf("freed key lastToken %d, want %d", g.LastToken, l.Token)
	}

	// Get is side-effect free, so the Connect GET form works too.
	q := url.Values{"connect": {"v1"}, "encoding": {"json"}, "message": {`{"key":"get/k"}`}}
	status, _, raw = a.do(http.MethodGet, servicePath+"Get?"+q.Encode(), "", nil)
	var viaGet getResp
	if status != http.StatusOK || strictDecode(raw, &viaGet) != nil || uint64(viaGet.LastToken) != uint64(l.Token) {
		t.Fatalf("GET Get answered HTTP %d %s", status, raw)
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	a := newAPI(t, srv.URL)

	// Acquire out of order; List sorts by key.
	keys := []string{"list/c", "list/a", "other/x", "list/b", "lis", "list/a/deeper"}
	byKey := map[string]wireLease{}
	for _, k := range keys {
		byKey[k] = a.acquire(k, "o-"+k, 10_000)
	}
	freed := a.acquire("list/freed", "o", 10_000)
	a.release("list/freed", freed.LeaseID)

	keysOf := func(ls []wireLease) []string {
		var out []string
		for _, l := range ls {
			if !l.same(byKey[l.Key]) {
				t.Fatalf("List returned %+v, want %+v", l, byKey[l.Key])
			}
			out = append(out, l.Key)
		}
		return out
	}
	all := slices.Sorted(slices.Values(keys))
	for _, tc := range []struct {
		prefix string
		limit  int
		want   []string
	}{
		{"", 0, all},
		{"", 100, all},
		{"list/", 0, []string{"list/a", "list/a/deeper", "list/b", "list/c"}},
		{"list/", 2, []string{"list/a", "list/a/deeper"}},
		{"list", 0, []string{"list/a", "list/a/deeper", "list/b", "list/c"}},
		{"lis", 0, []string{"lis", "list/a", "list/a/deeper", "list/b", "list/c"}},
		{"list/a", 1, []string{"list/a"}},
		{"nothing/", 0, nil},
		{"", 1, []string{"lis"}},
	} {
		if got := keysOf(a.list(tc.prefix, tc.limit)); !slices.Equal(got, tc.want) {
			t.Errorf("List(%q, %d) = %q, want %q", tc.prefix, tc.limit, got, tc.want)
		}
	}
	// An empty result has "leases":[], as the wire contract shows it, never
	// null or an error, next to the revision it reflects.
	status, raw := a.post("List", `{"prefix":"nothing/"}`)
	var empty map[string]json.RawMessage
	if status != http.StatusOK || json.Unmarshal(raw, &empty) != nil || string(empty["leases"]) != `[]` ||
		len(empty) != 2 || !regexp.MustCompile(`^"[1-9][0-9]*"$`).Match(empty["revision"]) {
		t.Fatalf("empty List: HTTP %d %s; want {\"leases\":[], \"revision\":\"N\"}", status, raw)
	}
	// An empty body lists everything too.
	if got := keysOf(a.list("", 0)); len(got) != len(keys) {
		t.Fatalf("List() returned %d leases, want %d", len(got), len(keys))
	}
	e := a.fail("List", `{"prefix":"list/","limit":-1}`, "invalid_argument")
	if !strings.Contains(e.Message, "limit") {
		t.Errorf("negative limit message %q does not name the field", e.Message)
	}
}

// watcher reads one Watch stream.
type watcher struct {
	stream *connect.ServerStreamForClient[fencedv1.WatchResponse]
}

func startWatch(t *testing.T, c fencedv1connect.LeaseServiceClient, prefix string, after uint64) *watcher {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	stream, err := c.Watch(ctx, connect.NewRequest(&fencedv1.WatchRequest{Prefix: prefix, AfterRevision: after}))
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	t.Cleanup(func() { stream.Close() })
	return &watcher{stream: stream}
}

func (w *watcher) next(t *testing.T) *fencedv1.Event {
	t.Helper()
	if !w.stream.Receive() {
		t.Fatalf("watch stream ended: %v", w.stream.Err())
	}
	return w.stream.Msg().GetEvent()
}

// expect reads the next event and checks its type and lease, which it shows
// without the lease ID.
func (w *watcher) expect(t *testing.T, typ fencedv1.Event_Type, l wireLease) *fencedv1.Event {
	t.Helper()
	ev := w.next(t)
	got := ev.GetLease()
	if ev.GetType() != typ || got.GetKey() != l.Key || got.GetLeaseId() != "" || got.GetToken() != uint64(l.Token) || got.GetOwner() != l.Owner {
		t.Fatalf("event %v, want %v of %+v", ev, typ, l)
	}
	return ev
}

func TestWatch(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	a := newAPI(t, srv.URL)
	c := fencedv1connect.NewLeaseServiceClient(http.DefaultClient, srv.URL)

	// The first grant's token is its revision, so watching from just before
	// it replays it: the stream is in place before anything else happens,
	// with no sleep.
	first := a.acquire("watch/a", "alice", 10_000)
	w := startWatch(t, c, "watch/", uint64(first.Token)-1)
	a.acquire("elsewhere/x", "zed", 10_000) // outside the prefix
	a.release("watch/a", first.LeaseID)
	short := a.acquire("watch/b", "bob", 200) // left to expire
	ac := w.expect(t, fencedv1.Event_ACQUIRED, first)
	rel := w.expect(t, fencedv1.Event_RELEASED, first)
	acb := w.expect(t, fencedv1.Event_ACQUIRED, short)
	exp := w.expect(t, fencedv1.Event_EXPIRED, short)
	revs := []uint64{ac.GetRevision(), rel.GetRevision(), acb.GetRevision(), exp.GetRevision()}
	if !slices.IsSorted(revs) || len(slices.Compact(slices.Clone(revs))) != len(revs) {
		t.Fatalf("event revisions %v do not increase", revs)
	}
	if ac.GetRevision() != uint64(first.Token) || acb.GetRevision() != uint64(short.Token) {
		t.Fatalf("ACQUIRED revisions %d, %d, want the tokens %d, %d", ac.GetRevision(), acb.GetRevision(), first.Token, short.Token)
	}
	if exp.GetLease().GetTtlMs() != 200 {
		t.Fatalf("EXPIRED lease %v, want ttlMs 200", exp.GetLease())
	}

	// Resuming after the release replays only what followed it.
	again := startWatch(t, c, "watch/", rel.GetRevision())
	again.expect(t, fencedv1.Event_ACQUIRED, short)
	again.expect(t, fencedv1.Event_EXPIRED, short)
	// ... and then continues live.
	live := a.acquire("watch/c", "carol", 10_000)
	again.expect(t, fencedv1.Event_ACQUIRED, live)
	w.expect(t, fencedv1.Event_ACQUIRED, live)

	// A watch of everything sees the other prefix too.
	everything := startWatch(t, c, "", uint64(first.Token)-1)
	everything.expect(t, fencedv1.Event_ACQUIRED, first)
	if ev := everything.next(t); ev.GetLease().GetKey() != "elsewhere/x" || ev.GetType() != fencedv1.Event_ACQUIRED {
		t.Fatalf("unfiltered watch: %v, want ACQUIRED elsewhere/x", ev)
	}

	// A bad prefix is refused.
	bad := startWatch(t, c, "watch/\x00", 0)
	if bad.stream.Receive() || connect.CodeOf(bad.stream.Err()) != connect.CodeInvalidArgument {
		t.Fatalf("Watch with a NUL prefix: %v, want invalid_argument", bad.stream.Err())
	}
}

// recordingTransport remembers the protocol and content type of responses.
type recordingTransport struct {
	base   http.RoundTripper
	mu     sync.Mutex
	proto  []string
	ctype  []string
	status []int
}

func (r *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.base.RoundTrip(req)
	if err == nil {
		r.mu.Lock()
		r.proto = append(r.proto, resp.Proto)
		r.ctype = append(r.ctype, resp.Header.Get("Content-Type"))
		r.status = append(r.status, resp.StatusCode)
		r.mu.Unlock()
	}
	return resp, err
}

func TestProtocolsOnOnePort(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	a := newAPI(t, srv.URL)

	h2c := new(http.Protocols)
	h2c.SetUnencryptedHTTP2(true)
	for _, tc := range []struct {
		name      string
		protocols *http.Protocols
		opts      []connect.ClientOption
		wantProto string
		wantCType string
	}{
		{"grpc", h2c, []connect.ClientOption{connect.WithGRPC()}, "HTTP/2.0", "application/grpc"},
		{"grpc-web", nil, []connect.ClientOption{connect.WithGRPCWeb()}, "HTTP/1.1", "application/grpc-web+proto"},
		{"connect-proto", nil, nil, "HTTP/1.1", "application/proto"},
		{"connect-json-h2c", h2c, []connect.ClientOption{connect.WithProtoJSON()}, "HTTP/2.0", "application/json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := &http.Transport{Protocols: tc.protocols}
			t.Cleanup(tr.CloseIdleConnections)
			rec := &recordingTransport{base: tr}
			c := fencedv1connect.NewLeaseServiceClient(&http.Client{Transport: rec}, srv.URL, tc.opts...)
			ctx := context.Background()
			key := "proto/" + tc.name

			resp, err := c.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: key, Owner: tc.name, TtlMs: 10_000}))
			if err != nil {
				t.Fatalf("Acquire: %v", err)
			}
			l := resp.Msg.GetLease()
			checkLease(t, wireLease{Key: l.GetKey(), LeaseID: l.GetLeaseId(), Owner: l.GetOwner(), Token: jsonU64(l.GetToken()),
				TTLMs: jsonI64(l.GetTtlMs()), RemainingMs: jsonI64(l.GetRemainingMs())}, key, tc.name, 10_000)

			// The grant is the same one the JSON API sees.
			if g := a.get(key); g.Lease == nil || g.Lease.LeaseID != "" || uint64(g.Lease.Token) != l.GetToken() {
				t.Fatalf("JSON Get %+v, want the %s grant %v", g.Lease, tc.name, l)
			}

			// Errors and their details survive every protocol.
			_, err = c.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: key, Owner: "other", TtlMs: 10_000}))
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != connect.CodeFailedPrecondition {
				t.Fatalf("second Acquire: %v, want failed_precondition", err)
			}
			var held *fencedv1.LeaseHeld
			for _, d := range ce.Details() {
				if v, err := d.Value(); err == nil {
					if h, ok := v.(*fencedv1.LeaseHeld); ok {
						held = h
					}
				}
			}
			if held == nil || held.GetOwner() != tc.name || held.GetToken() != l.GetToken() {
				t.Fatalf("held details %v, want owner %q token %d", ce.Details(), tc.name, l.GetToken())
			}

			if _, err := c.Renew(ctx, connect.NewRequest(&fencedv1.RenewRequest{Key: key, LeaseId: l.GetLeaseId()})); err != nil {
				t.Fatalf("Renew: %v", err)
			}
			if _, err := c.Release(ctx, connect.NewRequest(&fencedv1.ReleaseRequest{Key: key, LeaseId: l.GetLeaseId()})); err != nil {
				t.Fatalf("Release: %v", err)
			}
			_, err = c.Release(ctx, connect.NewRequest(&fencedv1.ReleaseRequest{Key: key, LeaseId: l.GetLeaseId()}))
			if connect.CodeOf(err) != connect.CodeNotFound {
				t.Fatalf("second Release: %v, want not_found", err)
			}

			rec.mu.Lock()
			defer rec.mu.Unlock()
			for i := range rec.proto {
				want := tc.wantCType
				if rec.status[i] != http.StatusOK && tc.opts == nil {
					// Connect unary errors are JSON whatever the codec.
					want = "application/json"
				}
				if rec.proto[i] != tc.wantProto || !strings.HasPrefix(rec.ctype[i], want) {
					t.Fatalf("response %d came as %s %s, want %s %s", i, rec.proto[i], rec.ctype[i], tc.wantProto, tc.wantCType)
				}
			}
		})
	}
}

// invalidUTF8Acquire is an AcquireRequest in the binary protobuf encoding
// whose key is not UTF-8; JSON cannot carry such a string.
func invalidUTF8Acquire() []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, []byte("bad/\xff\xfe"))
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendBytes(b, []byte("mallory"))
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	b = protowire.AppendVarint(b, 5000)
	return b
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	a := newAPI(t, srv.URL)
	sentinel := a.acquire("bad/held", "alice", 60_000)
	freed := a.acquire("bad/freed", "alice", 60_000)
	a.release("bad/freed", freed.LeaseID)

	type state struct {
		leases          []wireLease
		lastHeld, freed uint64
		tokens          float64
	}
	snapshot := func() state {
		ls := a.list("", 0)
		for i := range ls {
			ls[i].RemainingMs = 0 // moves with time
		}
		return state{ls, uint64(a.get("bad/held").LastToken), uint64(a.get("bad/freed").LastToken), a.metric("fenced_tokens_issued_total")}
	}
	before := snapshot()

	key := func(k string) string { return fmt.Sprintf(`{"key":%q,"owner":"mallory","ttlMs":5000}`, k) }
	ttl := func(ms string) string { return `{"key":"bad/k","owner":"mallory","ttlMs":` + ms + `}` }
	const invalid = "invalid_argument"
	for _, tc := range []struct {
		name        string
		httpMethod  string // default POST
		method      string
		contentType string // default application/json
		body        any
		status      int    // HTTP status; default from code
		code        string // Connect code; "" when the answer is not a Connect error
		msg         string // the message names the problem
	}{
		{name: "empty key", method: "Acquire", body: key(""), code: invalid, msg: "key"},
		{name: "missing key", method: "Acquire", body: `{"owner":"mallory","ttlMs":5000}`, code: invalid, msg: "key"},
		{name: "zero ttl", method: "Acquire", body: ttl("0"), code: invalid, msg: "ttlMs"},
		{name: "missing ttl", method: "Acquire", body: `{"key":"bad/k"}`, code: invalid, msg: "ttlMs"},
		{name: "negative ttl", method: "Acquire", body: ttl("-5"), code: invalid, msg: "ttlMs"},
		{name: "ttl above max", method: "Acquire", body: ttl("3600001"), code: invalid, msg: "ttlMs"},
		{name: "ttl 1e15 number", method: "Acquire", body: ttl("1000000000000000"), code: invalid, msg: "ttlMs"},
		{name: "ttl 1e15 string", method: "Acquire", body: ttl(`"1000000000000000"`), code: invalid, msg: "ttlMs"},
		{name: "ttl max int64", method: "Acquire", body: ttl(`"9223372036854775807"`), code: invalid, msg: "ttlMs"},
		{name: "ttl below min", method: "Acquire", body: ttl("50"), code: invalid, msg: "ttlMs"},
		{name: "ttl beyond int64", method: "Acquire", body: ttl(`"9223372036854775808"`), code: invalid, msg: "ttlMs"},
		{name: "1 MiB key", method: "Acquire", body: key(strings.Repeat("k", 1<<20)), code: invalid, msg: "limit"},
		{name: "513-byte key", method: "Acquire", body: key(strings.Repeat("k", 513)), code: invalid, msg: "513"},
		{name: "NUL in key", method: "Acquire", body: `{"key":"bad/a\u0000b","owner":"mallory","ttlMs":5000}`, code: invalid, msg: "key"},
		{name: "BEL in key", method: "Acquire", body: `{"key":"bad/a\u0007b","owner":"mallory","ttlMs":5000}`, code: invalid, msg: "key"},
		{name: "newline in key", method: "Acquire", body: `{"key":"bad/a\nb","owner":"mallory","ttlMs":5000}`, code: invalid, msg: "key"},
		{name: "DEL in key", method: "Acquire", body: `{"key":"bad/a\u007fb","owner":"mallory","ttlMs":5000}`, code: invalid, msg: "key"},
		{name: "invalid UTF-8 key (binary protobuf)", method: "Acquire", contentType: "application/proto", body: invalidUTF8Acquire(), code: invalid, msg: "UTF-8"},
		{name: "257-byte owner", method: "Acquire", body: fmt.Sprintf(`{"key":"bad/k","owner":%q,"ttlMs":5000}`, strings.Repeat("o", 257)), code: invalid, msg: "owner"},
		{name: "control char in owner", method: "Acquire", body: `{"key":"bad/k","owner":"a\u001bb","ttlMs":5000}`, code: invalid, msg: "owner"},
		{name: "negative waitMs", method: "Acquire", body: `{"key":"bad/k","owner":"o","ttlMs":5000,"waitMs":-1}`, code: invalid, msg: "waitMs"},
		{name: "waitMs above max", method: "Acquire", body: `{"key":"bad/k","owner":"o","ttlMs":5000,"waitMs":"1000000000000000"}`, code: invalid, msg: "waitMs"},
		{name: "bad input on a held key", method: "Acquire", body: `{"key":"bad/held","owner":"o","ttlMs":0}`, code: invalid, msg: "ttlMs"},
		{name: "malformed JSON", method: "Acquire", body: `{"key":"bad/k",`, code: invalid, msg: "unmarshal"},
		{name: "not an object", method: "Acquire", body: `["bad/k"]`, code: invalid, msg: "unmarshal"},
		{name: "empty body", method: "Acquire", body: "", code: invalid, msg: "empty request body"},
		{name: "ttl of wrong type", method: "Acquire", body: ttl(`"abc"`), code: invalid, msg: "ttlMs"},
		{name: "ttl fractional", method: "Acquire", body: ttl("1500.5"), code: invalid, msg: "ttlMs"},
		{name: "key of wrong type", method: "Acquire", body: `{"key":5,"owner":"o","ttlMs":5000}`, code: invalid, msg: "key"},
		{name: "renew empty lease id", method: "Renew", body: `{"key":"bad/held","leaseId":""}`, code: invalid, msg: "leaseId"},
		{name: "renew empty key", method: "Renew", body: fmt.Sprintf(`{"leaseId":%q}`, sentinel.LeaseID), code: invalid, msg: "key"},
		{name: "renew huge lease id", method: "Renew", body: fmt.Sprintf(`{"key":"bad/held","leaseId":%q}`, strings.Repeat("a", 65)), code: invalid, msg: "leaseId"},
		{name: "release empty lease id", method: "Release", body: `{"key":"bad/held"}`, code: invalid, msg: "leaseId"},
		{name: "release empty key", method: "Release", body: fmt.Sprintf(`{"leaseId":%q}`, sentinel.LeaseID), code: invalid, msg: "key"},
		{name: "release control char in lease id", method: "Release", body: `{"key":"bad/held","leaseId":"ab\u0001"}`, code: invalid, msg: "leaseId"},
		{name: "get empty key", method: "Get", body: `{}`, code: invalid, msg: "key"},
		{name: "get NUL key", method: "Get", body: `{"key":"\u0000"}`, code: invalid, msg: "key"},
		{name: "list control char prefix", method: "List", body: `{"prefix":"bad/\u0007"}`, code: invalid, msg: "prefix"},
		{name: "list negative limit", method: "List", body: `{"limit":-5}`, code: invalid, msg: "limit"},
		{name: "unknown method", method: "Steal", body: key("bad/k"), status: http.StatusNotFound},
		{name: "GET on Acquire", httpMethod: http.MethodGet, method: "Acquire", status: http.StatusMethodNotAllowed},
		{name: "GET on Release", httpMethod: http.MethodGet, method: "Release", status: http.StatusMethodNotAllowed},
		{name: "text/plain body", method: "Acquire", contentType: "text/plain", body: key("bad/k"), status: http.StatusUnsupportedMediaType},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAPI(t, srv.URL)
			hm := cmpOr(tc.httpMethod, http.MethodPost)
			ct := cmpOr(tc.contentType, "application/json")
			if hm == http.MethodGet {
				ct = ""
			}
			status, _, raw := a.do(hm, servicePath+tc.method, ct, tc.body)
			t.Logf("HTTP %d %.300s", status, raw)
			if tc.code != "" {
				e := a.checkError(tc.name, status, raw, tc.code)
				if !strings.Contains(e.Message, tc.msg) {
					t.Errorf("message %q does not mention %q", e.Message, tc.msg)
				}
			} else if status != tc.status {
				t.Fatalf("HTTP %d %s, want %d", status, raw, tc.status)
			}
			if after := snapshot(); !equalState(before.leases, after.leases) || before.lastHeld != after.lastHeld ||
				before.freed != after.freed || before.tokens != after.tokens {
				t.Fatalf("state changed:\nbefore %+v\nafter  %+v", before, after)
			}
			if status, _, _ := a.do(http.MethodGet, "/healthz", "", nil); status != http.StatusOK {
				t.Fatalf("/healthz %d after the bad request", status)
			}
		})
	}

	// Unknown fields are ignored, so older servers accept newer clients.
	var r leaseResp
	a.ok("Acquire", `{"key":"bad/k","owner":"o","ttlMs":5000,"priority":7}`, &r)
	checkLease(t, *r.Lease, "bad/k", "o", 5000)
	a.release("bad/k", r.Lease.LeaseID)
	if got := a.metric(`fenced_acquisitions_total{result="invalid"}`); got < 20 {
		t.Errorf(`fenced_acquisitions_total{result="invalid"} = %v after the bad acquisitions`, got)
	}
	// A 512-byte key of multi-byte printable characters is the limit, not above it.
	long := strings.Repeat("é", 256)
	l := a.acquire(long, "o", 5000)
	a.release(long, l.LeaseID)
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func equalState(a, b []wireLease) bool {
	return slices.EqualFunc(a, b, func(x, y wireLease) bool { return x.same(y) })
}

func TestTokensIncreaseAcrossRestart(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	var (
		last    uint64 // last token of "tok/cycled"
		held    wireLease
		lastAll uint64
	)
	for round := range 3 {
		a := newAPI(t, srv.URL)
		if round > 0 {
			// Acknowledged leases survive the restart, with id and token:
			// Get shows the token, Renew accepts the id.
			g := a.get(held.Key)
			if g.Lease == nil || !g.Lease.same(held) {
				t.Fatalf("round %d: held lease after restart %+v, want %+v", round, g.Lease, held)
			}
			if got := a.renew(held.Key, held.LeaseID); got.Token != held.Token {
				t.Fatalf("round %d: renew after restart token %d, want %d", round, got.Token, held.Token)
			}
			if g := a.get("tok/cycled"); uint64(g.LastToken) != last || g.Lease != nil {
				t.Fatalf("round %d: released key after restart: %+v lastToken %d, want lastToken %d", round, g.Lease, g.LastToken, last)
			}
			a.fail("Acquire", map[string]any{"key": held.Key, "owner": "x", "ttlMs": 1000}, "failed_precondition")
			a.release(held.Key, held.LeaseID)
		}
		for range 4 {
			l := a.acquire("tok/cycled", "o", 10_000)
			if uint64(l.Token) <= last {
				t.Fatalf("round %d: token %d after %d", round, l.Token, last)
			}
			last = uint64(l.Token)
			a.release(l.Key, l.LeaseID)
		}
		prev := uint64(held.Token)
		held = a.acquire("tok/held", "holder", 60_000)
		if uint64(held.Token) <= prev {
			t.Fatalf("round %d: held token %d after %d", round, held.Token, prev)
		}
		lastAll = max(lastAll, uint64(held.Token), last)
		srv = srv.Restart(t)
	}
	// Even a key never seen before starts above every token issued.
	a := newAPI(t, srv.URL)
	if l := a.acquire("tok/new", "o", 1000); uint64(l.Token) <= lastAll {
		t.Fatalf("new key token %d, not above %d", l.Token, lastAll)
	}
}

type acquireResult struct {
	lease wireLease
	err   wireError
	ok    bool
	took  time.Duration
}

// acquireAsync runs a waiting acquisition in a goroutine.
func acquireAsync(t *testing.T, base, key, owner string, ttlMs, waitMs int64) <-chan acquireResult {
	a := newAPI(t, base)
	ch := make(chan acquireResult, 1)
	body, _ := json.Marshal(map[string]any{"key": key, "owner": owner, "ttlMs": ttlMs, "waitMs": waitMs})
	go func() {
		start := time.Now()
		req, _ := http.NewRequest(http.MethodPost, base+servicePath+"Acquire", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		var res acquireResult
		resp, err := a.hc.Do(req)
		if err != nil {
			res.err = wireError{Code: "transport", Message: err.Error()}
			ch <- res
			return
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		res.took = time.Since(start)
		if resp.StatusCode == http.StatusOK {
			var r leaseResp
			if err := strictDecode(raw, &r); err == nil && r.Lease != nil {
				res.lease, res.ok = *r.Lease, true
			} else {
				res.err = wireError{Code: "decode", Message: string(raw)}
			}
		} else if err := json.Unmarshal(raw, &res.err); err != nil {
			res.err = wireError{Code: "decode", Message: string(raw)}
		}
		ch <- res
	}()
	return ch
}

func receive(t *testing.T, ch <-chan acquireResult) acquireResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(15 * time.Second):
		t.Fatal("waiting acquisition did not answer")
		return acquireResult{}
	}
}

func TestWaitFIFO(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	a := newAPI(t, srv.URL)
	holder := a.acquire("wait/k", "a", 30_000)

	b := acquireAsync(t, srv.URL, "wait/k", "b", 30_000, 10_000)
	a.awaitMetric("fenced_waiters", 1)
	c := acquireAsync(t, srv.URL, "wait/k", "c", 30_000, 10_000)
	a.awaitMetric("fenced_waiters", 2)

	a.release("wait/k", holder.LeaseID)
	rb := receive(t, b)
	if !rb.ok || rb.lease.Owner != "b" || rb.lease.Token <= holder.Token {
		t.Fatalf("first waiter got %+v, want the lease with a token above %d", rb, holder.Token)
	}
	// B's answer is sent after it left the queue: C alone waits, unserved.
	if got := a.metric("fenced_waiters"); got != 1 {
		t.Fatalf("fenced_waiters = %v after the first waiter was served, want 1", got)
	}
	select {
	case rc := <-c:
		t.Fatalf("second waiter answered while the key is held: %+v", rc)
	default:
	}
	if g := a.get("wait/k"); g.Lease == nil || !g.Lease.same(rb.lease) {
		t.Fatalf("Get %+v, want the first waiter's lease %+v", g.Lease, rb.lease)
	}

	a.release("wait/k", rb.lease.LeaseID)
	rc := receive(t, c)
	if !rc.ok || rc.lease.Owner != "c" || rc.lease.Token <= rb.lease.Token {
		t.Fatalf("second waiter got %+v, want the lease with a token above %d", rc, rb.lease.Token)
	}
	a.awaitMetric("fenced_waiters", 0)

	// A waiter that gives up (its client goes away) leaves the line; the
	// one behind it is served next.
	ctx, cancel := context.WithCancel(context.Background())
	quitter := make(chan error, 1)
	go func() {
		c := fencedv1connect.NewLeaseServiceClient(http.DefaultClient, srv.URL, connect.WithProtoJSON())
		_, err := c.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "wait/k", Owner: "quitter", TtlMs: 30_000, WaitMs: 10_000}))
		quitter <- err
	}()
	a.awaitMetric("fenced_waiters", 1)
	d := acquireAsync(t, srv.URL, "wait/k", "d", 30_000, 10_000)
	a.awaitMetric("fenced_waiters", 2)
	cancel()
	if err := <-quitter; connect.CodeOf(err) != connect.CodeCanceled {
		t.Fatalf("cancelled waiter: %v", err)
	}
	a.awaitMetric("fenced_waiters", 1)
	a.release("wait/k", rc.lease.LeaseID)
	if rd := receive(t, d); !rd.ok || rd.lease.Owner != "d" || rd.lease.Token <= rc.lease.Token {
		t.Fatalf("waiter behind a cancelled one got %+v", rd)
	}

	// Waiting for a free key does not wait.
	free := receive(t, acquireAsync(t, srv.URL, "wait/free", "e", 30_000, 10_000))
	if !free.ok || free.took > 5*time.Second {
		t.Fatalf("waiting acquire of a free key: %+v", free)
	}
}

func TestWaitEnds(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	a := newAPI(t, srv.URL)
	holder := a.acquire("waitend/k", "alice", 30_000)

	const waitMs = 300
	r := receive(t, acquireAsync(t, srv.URL, "waitend/k", "bob", 5000, waitMs))
	if r.ok || r.err.Code != "failed_precondition" {
		t.Fatalf("wait ended with %+v, want failed_precondition", r)
	}
	if r.took < waitMs*time.Millisecond {
		t.Fatalf("answered after %v, before the %dms wait ended", r.took, waitMs)
	}
	held := r.err.leaseHeld(t)
	if held.GetOwner() != "alice" || held.GetToken() != uint64(holder.Token) || held.GetRemainingMs() <= 0 {
		t.Fatalf("LeaseHeld %v, want alice's token %d and a remaining TTL", held, holder.Token)
	}
	if g := a.get("waitend/k"); g.Lease == nil || !g.Lease.same(holder) {
		t.Fatalf("holder changed: %+v", g.Lease)
	}
	a.awaitMetric("fenced_waiters", 0)
}

// The tests of TTLs below put the server's lease clock under their control:
// 200ms TTLs pass when the test advances the clock, so a loaded machine can
// neither expire a lease early nor hide an expiry that should happen.

func TestExpiryWakesWaiter(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	clock := server.UseManualClock(srv.Server)
	a := newAPI(t, srv.URL)
	holder := a.acquire("waitexp/k", "alice", 200) // never renewed

	ch := acquireAsync(t, srv.URL, "waitexp/k", "bob", 5000, 10_000)
	a.awaitMetric("fenced_waiters", 1)
	clock.Advance(199 * time.Millisecond)
	if g := a.get("waitexp/k"); g.Lease == nil || !g.Lease.same(holder) || g.Lease.RemainingMs != 1 {
		t.Fatalf("1ms before expiry Get = %+v, want alice's lease with 1ms left", g.Lease)
	}
	clock.Advance(time.Millisecond)
	r := receive(t, ch)
	if !r.ok || r.lease.Owner != "bob" || r.lease.Token <= holder.Token {
		t.Fatalf("waiter got %+v, want the lease after alice's expired, token above %d", r, holder.Token)
	}
	a.fail("Renew", map[string]any{"key": "waitexp/k", "leaseId": holder.LeaseID}, "not_found")
}

func TestExpiry(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	clock := server.UseManualClock(srv.Server)
	a := newAPI(t, srv.URL)
	c := fencedv1connect.NewLeaseServiceClient(http.DefaultClient, srv.URL)

	l := a.acquire("exp/k", "alice", 200)
	w := startWatch(t, c, "exp/", uint64(l.Token)-1)
	w.expect(t, fencedv1.Event_ACQUIRED, l)
	clock.Advance(199 * time.Millisecond)
	if g := a.get("exp/k"); g.Lease == nil || !g.Lease.same(l) || g.Lease.RemainingMs != 1 {
		t.Fatalf("1ms before expiry Get = %+v, want the lease with 1ms left", g.Lease)
	}
	clock.Advance(time.Millisecond)
	w.expect(t, fencedv1.Event_EXPIRED, l)

	// The EXPIRED event is sent once the expiry is applied, so every read
	// after it sees the key free.
	if g := a.get("exp/k"); g.Lease != nil || uint64(g.LastToken) != uint64(l.Token) {
		t.Fatalf("after expiry Get = %+v lastToken %d, want free with lastToken %d", g.Lease, g.LastToken, l.Token)
	}
	a.fail("Renew", map[string]any{"key": "exp/k", "leaseId": l.LeaseID}, "not_found")
	a.fail("Release", map[string]any{"key": "exp/k", "leaseId": l.LeaseID}, "not_found")
	next := a.acquire("exp/k", "bob", 10_000)
	if next.Token <= l.Token {
		t.Fatalf("token after expiry %d, not above %d", next.Token, l.Token)
	}
	w.expect(t, fencedv1.Event_ACQUIRED, next)
	if got := a.metric("fenced_expirations_total"); got != 1 {
		t.Fatalf("fenced_expirations_total = %v, want 1", got)
	}
}

func TestRenewKeepsAlive(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	clock := server.UseManualClock(srv.Server)
	a := newAPI(t, srv.URL)
	l := a.acquire("alive/k", "alice", 200)

	// Ten renewals, each 150ms after the last: 1.5s of lease clock, seven
	// TTLs, and the lease is kept because each renewal restarts the TTL.
	for range 10 {
		clock.Advance(150 * time.Millisecond)
		if r := a.renew("alive/k", l.LeaseID); r.Token != l.Token || r.LeaseID != l.LeaseID || r.RemainingMs != 200 {
			t.Fatalf("renew answered %+v, want the same lease %+v with 200ms left", r, l)
		}
	}
	if g := a.get("alive/k"); g.Lease == nil || !g.Lease.same(l) {
		t.Fatalf("after 1.5s of renewals Get = %+v, want %+v", g.Lease, l)
	}
	if got := a.metric("fenced_expirations_total"); got != 0 {
		t.Fatalf("fenced_expirations_total = %v, want 0", got)
	}
	// Without the next renewal, the lease ends one TTL after the last.
	clock.Advance(200 * time.Millisecond)
	a.awaitMetric("fenced_expirations_total", 1)
	a.fail("Renew", map[string]any{"key": "alive/k", "leaseId": l.LeaseID}, "not_found")
}

func TestHealthAndMetrics(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	a := newAPI(t, srv.URL)
	status, _, body := a.do(http.MethodGet, "/healthz", "", nil)
	if status != http.StatusOK {
		t.Fatalf("/healthz: HTTP %d %s", status, body)
	}
	l := a.acquire("metrics/k", "o", 1000)
	a.fail("Acquire", map[string]any{"key": "metrics/k", "owner": "p", "ttlMs": 1000}, "failed_precondition")
	a.renew("metrics/k", l.LeaseID)
	for series, want := range map[string]float64{
		`fenced_acquisitions_total{result="granted"}`: 1,
		`fenced_acquisitions_total{result="held"}`:    1,
		`fenced_renewals_total{result="renewed"}`:     1,
		`fenced_leases_active`:                        1,
		`fenced_lease_bytes`:                          float64(lease.Cost("metrics/k", "o")),
		`fenced_tokens_issued_total`:                  1,
		`fenced_is_leader`:                            1,
		`fenced_waiters`:                              0,
	} {
		if got := a.metric(series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	_, _, body = a.do(http.MethodGet, "/metrics", "", nil)
	if bytes.Contains(body, []byte("metrics/k")) {
		t.Errorf("/metrics carries a lease key as a label")
	}
}

func TestServerLimits(t *testing.T) {
	t.Parallel()
	cfg := fencedtest.Config(t)
	cfg.ListLimit = 2
	cfg.MaxLeases = 3
	cfg.MaxIdleKeys = 1
	cfg.WatchHistory = 2
	srv := fencedtest.StartConfig(t, cfg)
	a := newAPI(t, srv.URL)

	la, lb, lc := a.acquire("lim/a", "o", 10_000), a.acquire("lim/b", "o", 10_000), a.acquire("lim/c", "o", 10_000)
	e := a.fail("Acquire", `{"key":"lim/d","owner":"o","ttlMs":10000}`, "resource_exhausted")
	if !strings.Contains(e.Message, "limit") {
		t.Errorf("MaxLeases message %q", e.Message)
	}
	if g := a.get("lim/d"); g.Lease != nil || g.LastToken != 0 {
		t.Fatalf("refused grant left %+v", g)
	}

	// ListLimit caps every List, whatever limit the request asks for.
	for _, limit := range []int{0, 2, 100} {
		if got := a.list("lim/", limit); len(got) != 2 || got[0].Key != "lim/a" || got[1].Key != "lim/b" {
			t.Errorf("List(limit %d) = %+v, want lim/a, lim/b", limit, got)
		}
	}

	// With one idle key remembered, freeing b forgets a's last token; a
	// new grant of a still gets a larger token (I1 without the memory).
	a.release("lim/a", la.LeaseID)
	a.release("lim/b", lb.LeaseID)
	if g := a.get("lim/a"); g.LastToken != 0 {
		t.Fatalf("lim/a still remembered (lastToken %d) beyond MaxIdleKeys", g.LastToken)
	}
	if g := a.get("lim/b"); uint64(g.LastToken) != uint64(lb.Token) {
		t.Fatalf("lim/b lastToken %d, want %d", g.LastToken, lb.Token)
	}
	again := a.acquire("lim/a", "o", 10_000)
	if again.Token <= la.Token || again.Token <= lc.Token {
		t.Fatalf("token %d of a forgotten key, not above earlier tokens %d, %d", again.Token, la.Token, lc.Token)
	}

	// Resuming from a revision older than the kept history starts with
	// RESYNC: the watcher must re-read with List.
	c := fencedv1connect.NewLeaseServiceClient(http.DefaultClient, srv.URL)
	w := startWatch(t, c, "lim/", uint64(la.Token)-1)
	if ev := w.next(t); ev.GetType() != fencedv1.Event_RESYNC || ev.GetRevision() < uint64(again.Token) {
		t.Fatalf("watch from evicted history: first event %v, want RESYNC at revision >= %d", ev, again.Token)
	}
}

// TestOversizedBodyWithoutLength sends bodies above MaxBodyBytes whose size
// is not declared up front (chunked HTTP/1.1, gRPC frames). docs/protocol.md
// lists the body limit among the invalid_argument input limits.
func TestOversizedBodyWithoutLength(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	a := newAPI(t, srv.URL)
	hugeKey := strings.Repeat("k", 1<<20)

	t.Run("chunked JSON", func(t *testing.T) {
		body := fmt.Sprintf(`{"key":%q,"owner":"o","ttlMs":5000}`, hugeKey)
		// A reader of unknown size makes the request chunked.
		req, err := http.NewRequest(http.MethodPost, srv.URL+servicePath+"Acquire", io.MultiReader(strings.NewReader(body)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := a.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		a := newAPI(t, srv.URL)
		a.checkError("chunked oversized Acquire", resp.StatusCode, raw, "invalid_argument")
	})
	t.Run("gRPC", func(t *testing.T) {
		h2c := new(http.Protocols)
		h2c.SetUnencryptedHTTP2(true)
		tr := &http.Transport{Protocols: h2c}
		t.Cleanup(tr.CloseIdleConnections)
		c := fencedv1connect.NewLeaseServiceClient(&http.Client{Transport: tr}, srv.URL, connect.WithGRPC())
		_, err := c.Acquire(context.Background(), connect.NewRequest(&fencedv1.AcquireRequest{Key: hugeKey, TtlMs: 5000}))
		// gRPC servers conventionally answer RESOURCE_EXHAUSTED for a
		// message above their limit; either code refuses the request.
		if code := connect.CodeOf(err); code != connect.CodeInvalidArgument && code != connect.CodeResourceExhausted {
			t.Fatalf("oversized gRPC Acquire: %v", err)
		}
	})
	if ls := a.list("", 0); len(ls) != 0 {
		t.Fatalf("oversized requests left leases %+v", ls)
	}
	l := a.acquire("after/oversized", "o", 1000)
	a.release(l.Key, l.LeaseID)
}
