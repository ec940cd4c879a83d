package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/server"
)

// headersRT sets fixed headers on every request.
type headersRT struct {
	h    http.Header
	next http.RoundTripper
}

func (r headersRT) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, v := range r.h {
		req.Header[k] = v
	}
	return r.next.RoundTrip(req)
}

// authedClient is an HTTP client sending token (if any) and the extra
// header name: value (if any) on every request.
func authedClient(token, name, value string) *http.Client {
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	if name != "" {
		h.Set(name, value)
	}
	return &http.Client{Transport: headersRT{h, http.DefaultTransport}, Timeout: 10 * time.Second}
}

// With auth on, a follower authenticates each call it forwards and the
// leader authorizes the principal the follower names: writes, Revoke, the
// cluster RPCs and /v1/backup all keep their rules through a follower, and
// a client cannot pass for another principal by sending the header the
// nodes use between themselves.
func TestClusterAuthThroughFollower(t *testing.T) {
	const (
		aliceSecret = "alice-0123456789abcdef0123456789abcdef"
		opsSecret   = "ops-0123456789abcdef0123456789abcdef"
	)
	policy := filepath.Join(t.TempDir(), "auth.json")
	if err := os.WriteFile(policy, fmt.Appendf(nil, `{
  "tokens": [{"principal": "alice", "sha256": %q}, {"principal": "ops", "sha256": %q}],
  "rules": [
    {"principal": "alice", "prefix": "a/", "permissions": ["acquire", "renew", "read"]},
    {"principal": "ops", "prefix": "", "permissions": ["admin"]}
  ]
}`, server.HashSecret(aliceSecret), server.HashSecret(opsSecret)), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newStoppedCluster(t, 3)
	for i := range c.nodes {
		c.nodes[i].extraArgs = []string{"--auth-file", policy}
		c.start(i)
	}
	leader := c.waitLeader(20 * time.Second)
	follower := c.nodes[(leader+1)%3].url
	ctx := context.Background()
	lease := func(hc *http.Client) fencedv1connect.LeaseServiceClient {
		return fencedv1connect.NewLeaseServiceClient(hc, follower)
	}
	admin := func(hc *http.Client) fencedv1connect.AdminServiceClient {
		return fencedv1connect.NewAdminServiceClient(hc, follower)
	}
	cluster := func(hc *http.Client) fencedv1connect.ClusterServiceClient {
		return fencedv1connect.NewClusterServiceClient(hc, follower)
	}
	var (
		anon     = authedClient("", "", "")
		spoofer  = authedClient("", "Fenced-Forwarded-Principal", "token:ops")
		alice    = authedClient(aliceSecret, "", "")
		aliceOps = authedClient(aliceSecret, "Fenced-Forwarded-Principal", "token:ops")
		ops      = authedClient(opsSecret, "", "")
	)
	acquire := &fencedv1.AcquireRequest{Key: "a/1", Owner: "someone-else", TtlMs: 30_000}
	for name, hc := range map[string]*http.Client{"no credentials": anon, "spoofed principal": spoofer} {
		if _, err := lease(hc).Acquire(ctx, connect.NewRequest(acquire)); connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("acquire via follower, %s: %v, want unauthenticated", name, err)
		}
	}
	got, err := lease(alice).Acquire(ctx, connect.NewRequest(acquire))
	if err != nil {
		t.Fatalf("alice acquires via follower: %v", err)
	}
	if o := got.Msg.GetLease().GetOwner(); o != "alice" {
		t.Errorf("owner recorded through the follower: %q, want the principal alice", o)
	}
	if _, err := lease(alice).Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "b/1", TtlMs: 30_000})); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("alice acquires outside a/ via follower: %v, want permission_denied", err)
	}
	for name, hc := range map[string]*http.Client{"alice": alice, "alice claiming ops": aliceOps} {
		if _, err := admin(hc).Revoke(ctx, connect.NewRequest(&fencedv1.RevokeRequest{Key: "a/1"})); connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Errorf("revoke via follower by %s: %v, want permission_denied", name, err)
		}
		if _, err := cluster(hc).ListMembers(ctx, connect.NewRequest(&fencedv1.ListMembersRequest{})); connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Errorf("list members via follower by %s: %v, want permission_denied", name, err)
		}
		if _, err := cluster(hc).TransferLeadership(ctx, connect.NewRequest(&fencedv1.TransferLeadershipRequest{})); connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Errorf("transfer leadership via follower by %s: %v, want permission_denied", name, err)
		}
	}
	if _, err := cluster(spoofer).RemoveMember(ctx, connect.NewRequest(&fencedv1.RemoveMemberRequest{Id: c.nodes[leader].id})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("remove member via follower with a spoofed principal: %v, want unauthenticated", err)
	}
	for _, tc := range []struct {
		name string
		hc   *http.Client
		want int
	}{{"anonymous", anon, http.StatusUnauthorized}, {"spoofed principal", spoofer, http.StatusUnauthorized},
		{"alice", alice, http.StatusForbidden}, {"alice claiming ops", aliceOps, http.StatusForbidden}, {"ops", ops, http.StatusOK}} {
		resp, err := tc.hc.Get(follower + "/v1/backup")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("/v1/backup by %s: %s, want %d", tc.name, resp.Status, tc.want)
		}
	}
	r, err := admin(ops).Revoke(ctx, connect.NewRequest(&fencedv1.RevokeRequest{Key: "a/1"}))
	if err != nil {
		t.Fatalf("ops revokes via follower: %v", err)
	}
	if r.Msg.GetRevokedBy() != "ops" || r.Msg.GetLease().GetToken() != got.Msg.GetLease().GetToken() {
		t.Errorf("revoke via follower answered %v", r.Msg)
	}
	if _, err := lease(alice).Renew(ctx, connect.NewRequest(&fencedv1.RenewRequest{Key: "a/1", LeaseId: got.Msg.GetLease().GetLeaseId()})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("renewing the revoked lease via follower: %v, want not_found", err)
	}
	m, err := cluster(ops).ListMembers(ctx, connect.NewRequest(&fencedv1.ListMembersRequest{}))
	if err != nil || len(m.Msg.GetMembers()) != 3 {
		t.Errorf("ops lists members via follower: %v %v", m, err)
	}
}
