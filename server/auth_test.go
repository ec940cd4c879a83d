package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/internal/testpki"
	"github.com/fencedio/fenced/server/internal/api"
	"github.com/fencedio/fenced/server/internal/security"
)

// serveAPI starts a node with cfg and serves its API on a loopback port;
// it returns the node and the API's base URL.
func serveAPI(t testing.TB, cfg Config) (*Server, string) {
	t.Helper()
	s := newTestServer(t, cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.ServeListener(context.Background(), ln)
	scheme := "http"
	if cfg.TLS.Enabled() {
		scheme = "https"
	}
	return s, scheme + "://" + ln.Addr().String()
}

// bearer adds an Authorization header to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// caller is one client identity: its HTTP client and RPC clients.
type caller struct {
	lease fencedv1connect.LeaseServiceClient
	admin fencedv1connect.AdminServiceClient
}

func newCaller(base string, tlsConf *tls.Config, token string) caller {
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	protocols.SetUnencryptedHTTP2(true)
	var rt http.RoundTripper = &http.Transport{TLSClientConfig: tlsConf, Protocols: protocols}
	if token != "" {
		rt = bearer{token, rt}
	}
	hc := &http.Client{Transport: rt, Timeout: 10 * time.Second}
	return caller{fencedv1connect.NewLeaseServiceClient(hc, base), fencedv1connect.NewAdminServiceClient(hc, base)}
}

func writePolicy(t testing.TB, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "auth.json")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const (
	aliceSecret = "alice-0123456789abcdef0123456789abcdef"
	bobSecret   = "bob-0123456789abcdef0123456789abcdef"
	opsSecret   = "ops-0123456789abcdef0123456789abcdef"
	oldSecret   = "old-0123456789abcdef0123456789abcdef"
)

func testPolicy() string {
	return fmt.Sprintf(`{
  "tokens": [
    {"principal": "alice", "sha256": %q},
    {"principal": "bob", "sha256": %q},
    {"principal": "ops", "sha256": %q},
    {"principal": "alice", "sha256": %q, "expires": "2020-01-01T00:00:00Z"}
  ],
  "rules": [
    {"principal": "alice", "prefix": "a/", "permissions": ["acquire", "renew", "read", "watch"]},
    {"principal": "bob", "prefix": "a/", "permissions": ["acquire", "renew", "read"]},
    {"principal": "carol", "prefix": "c/", "permissions": ["acquire", "renew", "read"]},
    {"principal": "ops", "prefix": "", "permissions": ["admin"]}
  ]
}`, HashSecret(aliceSecret), HashSecret(bobSecret), HashSecret(opsSecret), HashSecret(oldSecret))
}

func codeOf(err error) connect.Code {
	if err == nil {
		return 0
	}
	return connect.CodeOf(err)
}

// Every way to be refused answers its own code and changes nothing: no
// credentials, unknown or expired credentials, a principal outside its
// prefixes, another principal's lease, an owner it may not claim, and an
// admin operation without admin.
func TestAuthDenyPaths(t *testing.T) {
	s, base := serveAPI(t, Config{AuthFile: writePolicy(t, testPolicy())})
	ctx := context.Background()
	var (
		anon   = newCaller(base, nil, "")
		wrong  = newCaller(base, nil, "not-a-token-0123456789abcdef")
		old    = newCaller(base, nil, oldSecret)
		alice  = newCaller(base, nil, aliceSecret)
		bob    = newCaller(base, nil, bobSecret)
		ops    = newCaller(base, nil, opsSecret)
		basicH = "Basic YWxpY2U6eA=="
	)
	held, err := alice.lease.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "a/1", TtlMs: 60_000}))
	if err != nil {
		t.Fatal(err)
	}
	l := held.Msg.GetLease()
	if l.GetOwner() != "alice" {
		t.Fatalf("owner of a lease acquired with no owner = %q, want the principal alice", l.GetOwner())
	}
	applied := func() uint64 { return s.fsm.View().Applied() }
	before := applied()
	// A renewal moves the deadline without a log entry: as seen from a
	// fixed instant, alice's lease must keep the time it had left.
	at := time.Now()
	left := s.remainingAt("a/1", at)

	acquire := func(c caller, key, owner string) error {
		_, err := c.lease.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: key, Owner: owner, TtlMs: 60_000}))
		return err
	}
	watch := func(c caller, prefix string) error {
		st, err := c.lease.Watch(ctx, connect.NewRequest(&fencedv1.WatchRequest{Prefix: prefix}))
		if err != nil {
			return err
		}
		defer st.Close()
		if st.Receive() {
			return nil
		}
		return st.Err()
	}
	basic := newCaller(base, nil, "")
	basic.lease = fencedv1connect.NewLeaseServiceClient(&http.Client{Transport: headerRT{"Authorization", basicH}}, base)

	for _, tc := range []struct {
		name string
		call func() error
		want connect.Code
	}{
		{"no credentials: acquire", func() error { return acquire(anon, "a/2", "") }, connect.CodeUnauthenticated},
		{"no credentials: get", func() error {
			_, err := anon.lease.Get(ctx, connect.NewRequest(&fencedv1.GetRequest{Key: "a/1"}))
			return err
		}, connect.CodeUnauthenticated},
		{"no credentials: watch", func() error { return watch(anon, "a/") }, connect.CodeUnauthenticated},
		{"no credentials: revoke", func() error {
			_, err := anon.admin.Revoke(ctx, connect.NewRequest(&fencedv1.RevokeRequest{Key: "a/1"}))
			return err
		}, connect.CodeUnauthenticated},
		{"no credentials: renew", func() error {
			_, err := anon.lease.Renew(ctx, connect.NewRequest(&fencedv1.RenewRequest{Key: "a/1", LeaseId: l.GetLeaseId()}))
			return err
		}, connect.CodeUnauthenticated},
		{"no credentials: release", func() error {
			_, err := anon.lease.Release(ctx, connect.NewRequest(&fencedv1.ReleaseRequest{Key: "a/1", LeaseId: l.GetLeaseId()}))
			return err
		}, connect.CodeUnauthenticated},
		{"no credentials: keepalive", func() error {
			st := newH2CCaller(base, "").lease.KeepAlive(ctx)
			defer st.CloseResponse()
			st.Send(&fencedv1.KeepAliveRequest{Key: "a/1", LeaseId: l.GetLeaseId()})
			_, err := st.Receive()
			return err
		}, connect.CodeUnauthenticated},
		{"wrong token", func() error { return acquire(wrong, "a/2", "") }, connect.CodeUnauthenticated},
		{"wrong token: release", func() error {
			_, err := wrong.lease.Release(ctx, connect.NewRequest(&fencedv1.ReleaseRequest{Key: "a/1", LeaseId: l.GetLeaseId()}))
			return err
		}, connect.CodeUnauthenticated},
		{"expired token: renew its principal's lease", func() error {
			_, err := old.lease.Renew(ctx, connect.NewRequest(&fencedv1.RenewRequest{Key: "a/1", LeaseId: l.GetLeaseId()}))
			return err
		}, connect.CodeUnauthenticated},
		{"not a bearer token", func() error { return acquire(basic, "a/2", "") }, connect.CodeUnauthenticated},
		{"expired token", func() error { return acquire(old, "a/2", "") }, connect.CodeUnauthenticated},
		{"outside prefix: acquire", func() error { return acquire(alice, "b/1", "") }, connect.CodePermissionDenied},
		{"outside prefix: get", func() error {
			_, err := alice.lease.Get(ctx, connect.NewRequest(&fencedv1.GetRequest{Key: "b/1"}))
			return err
		}, connect.CodePermissionDenied},
		{"outside prefix: list everything", func() error {
			_, err := alice.lease.List(ctx, connect.NewRequest(&fencedv1.ListRequest{}))
			return err
		}, connect.CodePermissionDenied},
		{"outside prefix: watch everything", func() error { return watch(alice, "") }, connect.CodePermissionDenied},
		{"no watch permission", func() error { return watch(bob, "a/") }, connect.CodePermissionDenied},
		{"another principal's lease: release", func() error {
			_, err := bob.lease.Release(ctx, connect.NewRequest(&fencedv1.ReleaseRequest{Key: "a/1", LeaseId: l.GetLeaseId()}))
			return err
		}, connect.CodePermissionDenied},
		{"another principal's lease: renew", func() error {
			_, err := bob.lease.Renew(ctx, connect.NewRequest(&fencedv1.RenewRequest{Key: "a/1", LeaseId: l.GetLeaseId()}))
			return err
		}, connect.CodePermissionDenied},
		{"another principal's lease: keepalive", func() error {
			st := newH2CCaller(base, bobSecret).lease.KeepAlive(ctx)
			defer st.CloseResponse()
			if err := st.Send(&fencedv1.KeepAliveRequest{Key: "a/1", LeaseId: l.GetLeaseId()}); err != nil {
				return err
			}
			resp, err := st.Receive()
			if err != nil {
				return err
			}
			if resp.GetErrorCode() != connect.CodePermissionDenied.String() {
				return fmt.Errorf("keepalive answered %q %q", resp.GetErrorCode(), resp.GetErrorMessage())
			}
			return connect.NewError(connect.CodePermissionDenied, errors.New(resp.GetErrorMessage()))
		}, connect.CodePermissionDenied},
		{"revoke without admin", func() error {
			_, err := alice.admin.Revoke(ctx, connect.NewRequest(&fencedv1.RevokeRequest{Key: "a/1"}))
			return err
		}, connect.CodePermissionDenied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := codeOf(tc.call()); got != tc.want {
				t.Fatalf("code %v, want %v", got, tc.want)
			}
			if got := applied(); got != before {
				t.Fatalf("log moved from %d to %d", before, got)
			}
			cur, ok := s.currentOf("a/1")
			if !ok || cur.ID != l.GetLeaseId() || cur.Token != l.GetToken() {
				t.Fatalf("alice's lease changed: %+v %v", cur, ok)
			}
			if got := s.remainingAt("a/1", at); got != left {
				t.Fatalf("alice's lease was renewed: %v left at a fixed instant, was %v", got, left)
			}
			for _, k := range []string{"a/2", "b/1"} {
				if _, ok := s.currentOf(k); ok {
					t.Fatalf("%s was granted", k)
				}
			}
		})
	}

	// What is allowed still works: alice renews her own lease, ops may do
	// anything.
	if _, err := alice.lease.Renew(ctx, connect.NewRequest(&fencedv1.RenewRequest{Key: "a/1", LeaseId: l.GetLeaseId()})); err != nil {
		t.Fatalf("alice renewing her lease: %v", err)
	}
	if _, err := ops.lease.List(ctx, connect.NewRequest(&fencedv1.ListRequest{})); err != nil {
		t.Fatalf("ops listing: %v", err)
	}
	if err := acquire(ops, "b/1", "someone-else"); err != nil {
		t.Fatalf("ops acquiring with an owner of its choosing: %v", err)
	}
	// Without the owner permission the principal is the owner, whatever the
	// request says.
	r, err := alice.lease.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "a/2", Owner: "bob", TtlMs: 60_000}))
	if err != nil || r.Msg.GetLease().GetOwner() != "alice" {
		t.Fatalf("alice acquiring as bob: %v %v, want granted to owner alice", r, err)
	}
	if l, _ := s.currentOf("b/1"); l.Owner != "someone-else" {
		t.Fatalf("owner of ops' lease %q, want someone-else", l.Owner)
	}
}

// newH2CCaller is newCaller over HTTP/2 without TLS, which the KeepAlive
// stream needs.
func newH2CCaller(base, token string) caller {
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: bearer{token, &http.Transport{Protocols: protocols}}, Timeout: 10 * time.Second}
	return caller{fencedv1connect.NewLeaseServiceClient(hc, base), fencedv1connect.NewAdminServiceClient(hc, base)}
}

type headerRT struct{ name, value string }

func (h headerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(h.name, h.value)
	return http.DefaultTransport.RoundTrip(r)
}

// Revoke ends the current lease whoever holds it: the holder's renewal
// fails, the log records who revoked, a waiter is handed the key with a
// higher token, and revoking a free key is NOT_FOUND.
func TestRevoke(t *testing.T) {
	s, base := serveAPI(t, Config{AuthFile: writePolicy(t, testPolicy())})
	ctx := context.Background()
	alice, bob, ops := newCaller(base, nil, aliceSecret), newCaller(base, nil, bobSecret), newCaller(base, nil, opsSecret)
	held, err := alice.lease.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "a/1", TtlMs: 60_000}))
	if err != nil {
		t.Fatal(err)
	}
	l := held.Msg.GetLease()
	// Watch from the state after the Acquire, as a Watch does: the
	// Acquire's own event may still be on its way to the watchers.
	sub, _, _ := s.hub.Subscribe("a/", s.fsm.Revision())
	defer s.hub.Unsubscribe(sub)

	type granted struct {
		l   *fencedv1.Lease
		err error
	}
	waited := make(chan granted, 1)
	go func() {
		r, err := bob.lease.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "a/1", TtlMs: 60_000, WaitMs: 20_000}))
		waited <- granted{r.Msg.GetLease(), err}
	}()
	// Revoke only once bob waits, so that the revocation hands a/1 over.
	// The waiter arrives over HTTP; nothing signals its arrival but the
	// queue itself.
	for deadline := time.Now().Add(10 * time.Second); s.waiters.Waiting("a/1") == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("bob never queued for a/1")
		}
	}
	r, err := ops.admin.Revoke(ctx, connect.NewRequest(&fencedv1.RevokeRequest{Key: "a/1"}))
	if err != nil {
		t.Fatal(err)
	}
	if r.Msg.GetRevokedBy() != "ops" || r.Msg.GetLease().GetToken() != l.GetToken() || r.Msg.GetLease().GetLeaseId() != "" {
		t.Fatalf("revoke answered %v", r.Msg)
	}
	<-sub.Ready()
	evs := sub.Take()
	if len(evs) == 0 {
		t.Fatal("no event of the revocation")
	}
	ev := evs[0] // then bob's grant, in the same entry
	if ev.By != "ops" || ev.Lease.ID != l.GetLeaseId() {
		t.Fatalf("event of the revocation: %+v", ev)
	}
	g := <-waited
	if g.err != nil || g.l.GetOwner() != "bob" || g.l.GetToken() <= l.GetToken() {
		t.Fatalf("waiter after revoke: %v %v (revoked token %d)", g.l, g.err, l.GetToken())
	}
	_, err = alice.lease.Renew(ctx, connect.NewRequest(&fencedv1.RenewRequest{Key: "a/1", LeaseId: l.GetLeaseId()}))
	if codeOf(err) != connect.CodeNotFound {
		t.Fatalf("renewing a revoked lease: %v, want not_found", err)
	}
	if _, err := ops.admin.Revoke(ctx, connect.NewRequest(&fencedv1.RevokeRequest{Key: "a/free"})); codeOf(err) != connect.CodeNotFound {
		t.Fatalf("revoking a free key: %v, want not_found", err)
	}
}

// Without an auth file, Revoke is open like every other call and records
// the anonymous principal.
func TestRevokeWithoutAuth(t *testing.T) {
	_, base := serveAPI(t, Config{})
	c := newCaller(base, nil, "")
	ctx := context.Background()
	if _, err := c.lease.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "k", Owner: "A", TtlMs: 60_000})); err != nil {
		t.Fatal(err)
	}
	r, err := c.admin.Revoke(ctx, connect.NewRequest(&fencedv1.RevokeRequest{Key: "k"}))
	if err != nil || r.Msg.GetRevokedBy() != "anonymous" || r.Msg.GetLease().GetOwner() != "A" {
		t.Fatalf("revoke: %v %v", r, err)
	}
}

func tlsConfig(t *testing.T, ca *testpki.CA, client *testpki.Leaf) *tls.Config {
	c := &tls.Config{RootCAs: ca.Pool()}
	if client != nil {
		c.Certificates = []tls.Certificate{client.TLS}
	}
	return c
}

// With a cert file the API speaks only TLS: plaintext gets nothing done; a
// verified client certificate is a principal; the certificate is replaced
// on Reload without a restart.
func TestTLS(t *testing.T) {
	ca := testpki.NewCA(t, "fenced")
	srvLeaf := ca.Server(t, "node1")
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
	srvLeaf.CopyTo(t, certFile, keyFile)
	s, base := serveAPI(t, Config{
		TLS:      TLSFiles{CertFile: certFile, KeyFile: keyFile, TrustedCAFile: ca.CertFile},
		AuthFile: writePolicy(t, testPolicy()),
	})
	ctx := context.Background()

	carol := newCaller(base, tlsConfig(t, ca, ca.Client(t, "carol")), "")
	r, err := carol.lease.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "c/1", TtlMs: 60_000}))
	if err != nil {
		t.Fatalf("acquire with a client certificate: %v", err)
	}
	if r.Msg.GetLease().GetOwner() != "carol" {
		t.Fatalf("owner %q, want the certificate's CN carol", r.Msg.GetLease().GetOwner())
	}
	// A SAN names the principal when the CN is empty.
	sanCarol := newCaller(base, tlsConfig(t, ca, ca.Client(t, "", "carol")), "")
	if _, err := sanCarol.lease.Get(ctx, connect.NewRequest(&fencedv1.GetRequest{Key: "c/1"})); err != nil {
		t.Fatalf("get with a SAN-only certificate: %v", err)
	}
	before := s.fsm.View().Applied()
	// A certificate from another CA is refused at the handshake.
	other := testpki.NewCA(t, "other")
	stranger := newCaller(base, tlsConfig(t, ca, other.Client(t, "carol")), "")
	if _, err := stranger.lease.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "c/2", TtlMs: 60_000})); err == nil {
		t.Fatal("a certificate of another CA was accepted")
	}
	// Over TLS a bearer token works as without.
	ops := newCaller(base, tlsConfig(t, ca, nil), opsSecret)
	plain := newCaller("http://"+base[len("https://"):], nil, opsSecret)
	_, err = plain.lease.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "c/2", TtlMs: 60_000}))
	if err == nil {
		t.Fatal("plaintext request to the TLS port succeeded")
	}
	// The TLS layer answers plaintext HTTP with 400 before any handler.
	resp, err := http.Post("http://"+base[len("https://"):]+"/fenced.v1.LeaseService/Acquire", "application/json",
		strings.NewReader(`{"key":"c/2","ttlMs":60000}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("plaintext HTTP to the TLS port answered %d, want 400", resp.StatusCode)
	}
	if got := s.fsm.View().Applied(); got != before {
		t.Fatalf("plaintext request moved the log from %d to %d", before, got)
	}
	if g, err := ops.lease.Get(ctx, connect.NewRequest(&fencedv1.GetRequest{Key: "c/2"})); err != nil || g.Msg.GetLease() != nil || g.Msg.GetLastToken() != 0 {
		t.Fatalf("after plaintext acquire: %v %v", g, err)
	}

	// Reload: the new certificate is served to new connections.
	served := func() *testpki.Leaf {
		conn, err := tls.Dial("tcp", base[len("https://"):], &tls.Config{RootCAs: ca.Pool()})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return &testpki.Leaf{Cert: conn.ConnectionState().PeerCertificates[0]}
	}
	if got := served().Cert.SerialNumber; got.Cmp(srvLeaf.Cert.SerialNumber) != 0 {
		t.Fatalf("served serial %v, want %v", got, srvLeaf.Cert.SerialNumber)
	}
	next := ca.Server(t, "node1")
	next.CopyTo(t, certFile, keyFile)
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := served().Cert.SerialNumber; got.Cmp(next.Cert.SerialNumber) != 0 {
		t.Fatalf("after reload served serial %v, want %v", got, next.Cert.SerialNumber)
	}
	// A broken file keeps the previous certificate.
	if err := os.WriteFile(certFile, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err == nil {
		t.Fatal("reload of a broken cert file succeeded")
	}
	if got := served().Cert.SerialNumber; got.Cmp(next.Cert.SerialNumber) != 0 {
		t.Fatalf("after a failed reload served serial %v, want %v", got, next.Cert.SerialNumber)
	}
}

// With client cert auth every client must present a certificate of the
// trusted CA.
func TestClientCertAuth(t *testing.T) {
	ca := testpki.NewCA(t, "fenced")
	leaf := ca.Server(t, "node1")
	_, base := serveAPI(t, Config{TLS: TLSFiles{CertFile: leaf.CertFile, KeyFile: leaf.KeyFile, TrustedCAFile: ca.CertFile, ClientCertAuth: true}})
	ctx := context.Background()
	if _, err := newCaller(base, tlsConfig(t, ca, nil), "").lease.Get(ctx, connect.NewRequest(&fencedv1.GetRequest{Key: "k"})); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	if _, err := newCaller(base, tlsConfig(t, ca, ca.Client(t, "x")), "").lease.Get(ctx, connect.NewRequest(&fencedv1.GetRequest{Key: "k"})); err != nil {
		t.Fatalf("a client with a certificate: %v", err)
	}
}

// The dashboard's lease stream shows keys and owners, so with auth on it
// needs the watch permission on its prefix like Watch does.
func TestDashboardEventsNeedWatch(t *testing.T) {
	_, base := serveAPI(t, Config{AuthFile: writePolicy(t, testPolicy())})
	for _, tc := range []struct {
		token, prefix string
		want          int
	}{
		{"", "a/", http.StatusUnauthorized},
		{"wrong-0123456789abcdef", "a/", http.StatusUnauthorized},
		{aliceSecret, "", http.StatusForbidden},
		{bobSecret, "a/", http.StatusForbidden}, // bob has no watch
		{aliceSecret, "a/", http.StatusOK},
	} {
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/events?prefix="+tc.prefix, nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := http.DefaultClient.Do(req.WithContext(ctx))
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		resp.Body.Close()
		cancel()
		if resp.StatusCode != tc.want {
			t.Errorf("token %q prefix %q: status %d, want %d", tc.token, tc.prefix, resp.StatusCode, tc.want)
		}
	}
}

// spoofRT sends the principal header the nodes use between themselves, as
// a client might try on the public port, beside an optional bearer token.
type spoofRT struct{ token, principal string }

func (s spoofRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(security.ForwardedPrincipalHeader, s.principal)
	r.Header.Set(api.ForwardedHeader, "n9")
	if s.token != "" {
		r.Header.Set("Authorization", "Bearer "+s.token)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// On the public port the forwarded-principal header counts for nothing:
// without credentials the call is unauthenticated, with them it runs as
// the principal they name. The cluster RPCs and /v1/backup need admin.
func TestPublicPortIgnoresForwardedPrincipal(t *testing.T) {
	s, base := serveAPI(t, Config{AuthFile: writePolicy(t, testPolicy())})
	ctx := context.Background()
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.WaitReady(waitCtx); err != nil {
		t.Fatal(err)
	}
	spoof := &http.Client{Transport: spoofRT{principal: security.EncodePrincipal(security.Principal{Name: "ops", Method: "token"})}}
	aliceSpoof := &http.Client{Transport: spoofRT{token: aliceSecret, principal: security.EncodePrincipal(security.Principal{Name: "ops", Method: "token"})}}

	_, err := fencedv1connect.NewLeaseServiceClient(spoof, base).Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "a/1", TtlMs: 10_000}))
	if codeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("acquire with only a spoofed principal: %v, want unauthenticated", err)
	}
	_, err = fencedv1connect.NewAdminServiceClient(aliceSpoof, base).Revoke(ctx, connect.NewRequest(&fencedv1.RevokeRequest{Key: "a/1"}))
	if codeOf(err) != connect.CodePermissionDenied {
		t.Errorf("alice revoking while claiming ops: %v, want permission_denied", err)
	}
	for name, hc := range map[string]*http.Client{"spoofed": spoof, "alice claiming ops": aliceSpoof} {
		cl := fencedv1connect.NewClusterServiceClient(hc, base)
		_, err := cl.ListMembers(ctx, connect.NewRequest(&fencedv1.ListMembersRequest{}))
		want := connect.CodePermissionDenied
		if hc == spoof {
			want = connect.CodeUnauthenticated
		}
		if codeOf(err) != want {
			t.Errorf("%s: list members: %v, want %v", name, err, want)
		}
		_, err = cl.AddMember(ctx, connect.NewRequest(&fencedv1.AddMemberRequest{Id: "n2", Address: "127.0.0.1:1"}))
		if codeOf(err) != want {
			t.Errorf("%s: add member: %v, want %v", name, err, want)
		}
	}
	for _, tc := range []struct {
		name string
		hc   *http.Client
		want int
	}{
		{"spoofed", spoof, http.StatusUnauthorized},
		{"alice claiming ops", aliceSpoof, http.StatusForbidden},
		{"ops", &http.Client{Transport: bearer{opsSecret, http.DefaultTransport}}, http.StatusOK},
	} {
		resp, err := tc.hc.Get(base + "/v1/backup")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("/v1/backup, %s: %s, want %d", tc.name, resp.Status, tc.want)
		}
	}
	members, err := fencedv1connect.NewClusterServiceClient(&http.Client{Transport: bearer{opsSecret, http.DefaultTransport}}, base).
		ListMembers(ctx, connect.NewRequest(&fencedv1.ListMembersRequest{}))
	if err != nil || len(members.Msg.GetMembers()) != 1 {
		t.Errorf("ops lists members: %v %v", members, err)
	}
}
