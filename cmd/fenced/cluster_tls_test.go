package main

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/internal/testpki"
)

// A cluster with TLS on both ports: clients reach every node's API over
// TLS with a client certificate as their principal, the nodes speak mutual
// TLS to each other on the peer port, a call through a follower is
// forwarded and answered, the loss of the leader (kill -9) fails over with
// TLS intact, plaintext to either port is refused with nothing changed, and
// SIGHUP reloads a node's peer certificate.
func TestClusterTLS(t *testing.T) {
	apiCA, clientCA, peerCA := testpki.NewCA(t, "api"), testpki.NewCA(t, "clients"), testpki.NewCA(t, "peers")
	policy := filepath.Join(t.TempDir(), "auth.json")
	if err := os.WriteFile(policy, []byte(`{"rules": [
  {"principal": "alice", "prefix": "tls/", "permissions": ["acquire", "renew", "read"]}
]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	alice := clientCA.Client(t, "alice")
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{ForceAttemptHTTP2: true,
		TLSClientConfig: &tls.Config{RootCAs: apiCA.Pool(), Certificates: []tls.Certificate{alice.TLS}}}}

	c := newStoppedCluster(t, 3)
	c.http = hc
	peers := make([]*testpki.Leaf, len(c.nodes))
	for i, nd := range c.nodes {
		api, peer := apiCA.Server(t, nd.id), peerCA.Server(t, nd.id)
		peers[i] = peer
		nd.url = "https://" + nd.api
		nd.extraArgs = []string{"--auth-file", policy,
			"--cert-file", api.CertFile, "--key-file", api.KeyFile, "--trusted-ca-file", clientCA.CertFile,
			"--peer-cert-file", peer.CertFile, "--peer-key-file", peer.KeyFile, "--peer-trusted-ca-file", peerCA.CertFile}
		c.start(i)
	}
	leader := c.waitLeader(20 * time.Second)
	follower := (leader + 1) % 3
	ctx := context.Background()
	at := func(i int) fencedv1connect.LeaseServiceClient {
		return fencedv1connect.NewLeaseServiceClient(hc, c.nodes[i].url)
	}

	first, err := at(follower).Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "tls/a", Owner: "mallory", TtlMs: 60_000}))
	if err != nil {
		t.Fatalf("acquire through a follower over TLS: %v", err)
	}
	if l := first.Msg.GetLease(); l.GetOwner() != "alice" || l.GetToken() == 0 {
		t.Errorf("lease granted through the follower: %v, want owner alice (the certificate's principal)", l)
	}

	// Plaintext: the API port answers at the TLS layer, the peer port
	// closes the connection, and neither acquires anything.
	plainAPI := fencedv1connect.NewLeaseServiceClient(&http.Client{Timeout: 5 * time.Second}, "http://"+c.nodes[follower].api)
	if _, err := plainAPI.Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "tls/plain", TtlMs: 60_000})); err == nil {
		t.Error("plaintext acquire on a TLS API port succeeded")
	}
	for _, i := range []int{leader, follower} {
		plaintextForward(t, c.nodes[i].raft, "tls/plain")
	}
	if got, err := at(leader).Get(ctx, connect.NewRequest(&fencedv1.GetRequest{Key: "tls/plain"})); err != nil || got.Msg.GetLease() != nil || got.Msg.GetLastToken() != 0 {
		t.Errorf("after plaintext attempts, tls/plain: %v %v, want never acquired", got, err)
	}

	// The leader dies; the other two elect a new one over TLS and go on
	// serving the lease it granted, through either of them.
	c.kill(leader)
	newLeader := c.waitLeader(20 * time.Second)
	var rest []int
	for i := range c.nodes {
		if i != leader {
			rest = append(rest, i)
		}
	}
	for _, i := range rest {
		r, err := at(i).Renew(ctx, connect.NewRequest(&fencedv1.RenewRequest{Key: "tls/a", LeaseId: first.Msg.GetLease().GetLeaseId()}))
		if err != nil || r.Msg.GetLease().GetToken() != first.Msg.GetLease().GetToken() {
			t.Errorf("renew through %s after the failover: %v %v, want the same token %d", c.nodes[i].id, r, err, first.Msg.GetLease().GetToken())
		}
	}
	otherFollower := rest[0]
	if otherFollower == newLeader {
		otherFollower = rest[1]
	}
	second, err := at(otherFollower).Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "tls/b", TtlMs: 60_000}))
	if err != nil {
		t.Fatalf("acquire through the remaining follower after the failover: %v", err)
	}
	if second.Msg.GetLease().GetToken() <= first.Msg.GetLease().GetToken() {
		t.Errorf("token after the failover %d, want above %d", second.Msg.GetLease().GetToken(), first.Msg.GetLease().GetToken())
	}
	plaintextForward(t, c.nodes[newLeader].raft, "tls/plain")
	if got, err := at(newLeader).Get(ctx, connect.NewRequest(&fencedv1.GetRequest{Key: "tls/plain"})); err != nil || got.Msg.GetLastToken() != 0 {
		t.Errorf("after plaintext attempts at the new leader, tls/plain: %v %v, want never acquired", got, err)
	}

	// SIGHUP reloads the peer certificate: the next handshake gets the new
	// one, and the cluster goes on forwarding.
	next := peerCA.Server(t, c.nodes[newLeader].id)
	next.CopyTo(t, peers[newLeader].CertFile, peers[newLeader].KeyFile)
	if err := c.nodes[newLeader].p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	asNode := &tls.Config{RootCAs: peerCA.Pool(), Certificates: []tls.Certificate{peerCA.Server(t, "n9").TLS}}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", c.nodes[newLeader].raft, asNode)
		if err != nil {
			t.Fatalf("a node certificate dials the peer port: %v", err)
		}
		served := conn.ConnectionState().PeerCertificates[0].SerialNumber
		conn.Close()
		if served.Cmp(next.Cert.SerialNumber) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("peer port still serves serial %v after SIGHUP, want %v", served, next.Cert.SerialNumber)
		}
	}
	if _, err := at(otherFollower).Acquire(ctx, connect.NewRequest(&fencedv1.AcquireRequest{Key: "tls/c", TtlMs: 60_000})); err != nil {
		t.Fatalf("acquire through a follower after the leader's peer certificate changed: %v", err)
	}
}

// plaintextForward poses as a follower on the peer port at addr without
// TLS: it announces a forwarded call and asks for key in alice's name, as a
// node does without peer TLS (HTTP/2 with prior knowledge). The port must
// refuse the connection.
func plaintextForward(t *testing.T, addr, key string) {
	t.Helper()
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Protocols: protocols,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err == nil {
				_, err = c.Write([]byte("A"))
			}
			return c, err
		}}}
	defer hc.CloseIdleConnections()
	req := connect.NewRequest(&fencedv1.AcquireRequest{Key: key, TtlMs: 60_000})
	req.Header().Set("Fenced-Forwarded-By", "n9")
	req.Header().Set("Fenced-Forwarded-Principal", "certificate:alice")
	if resp, err := fencedv1connect.NewLeaseServiceClient(hc, "http://"+addr).Acquire(context.Background(), req); err == nil {
		t.Errorf("peer port %s granted a plaintext forwarded call: %v", addr, resp.Msg)
	} else if ce := new(connect.Error); !errors.As(err, &ce) || len(ce.Meta()) > 0 {
		// An answer carries headers; a closed or reset connection none,
		// whichever code the client gives it (unavailable, canceled).
		t.Errorf("peer port %s answered a plaintext forwarded call: %v, want the connection refused", addr, err)
	}
}
