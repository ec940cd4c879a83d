package peers

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fencedio/fenced/internal/testutil"
)

// fakeSelf is a peer port's node with a fixed hello.
type fakeSelf struct{ h Hello }

func (f *fakeSelf) Hello() Hello { return f.h }
func (f *fakeSelf) Admit(from Hello) error {
	f.h.Cluster, f.h.Votes = from.Cluster, true
	return nil
}

func peerMuxOf(t *testing.T, cluster string) *Mux {
	t.Helper()
	return peerMuxLogging(t, cluster, slog.New(slog.DiscardHandler))
}

func peerMuxLogging(t *testing.T, cluster string, log *slog.Logger) *Mux {
	t.Helper()
	m, err := Listen("127.0.0.1:0", "", nil, log, &fakeSelf{Hello{Cluster: cluster, Node: "node-" + cluster}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// Every peer connection, raft's and forwarded calls alike, is refused
// between two members whose cluster IDs differ, on both ends; a member
// with no cluster ID yet (waiting to be added) is refused by nobody.
func TestPeerConnectionsCheckClusterID(t *testing.T) {
	for _, tc := range []struct {
		name, dialer, listener string
		refused                bool
	}{
		{"same cluster", "c1", "c1", false},
		{"other cluster", "c1", "c2", true},
		{"dialer waits to be added", "", "c1", false},
		{"listener waits to be added", "c1", "", false},
	} {
		for _, kind := range []byte{KindRaft, KindAPI} {
			t.Run(tc.name+"/"+string(kind), func(t *testing.T) {
				var logged testutil.SyncBuffer
				from, to := peerMuxOf(t, tc.dialer), peerMuxLogging(t, tc.listener, slog.New(slog.NewTextHandler(&logged, nil)))
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				c, err := from.DialKind(ctx, to.Addr().String(), kind)
				if tc.refused {
					var mismatch *ClusterMismatchError
					if !errors.As(err, &mismatch) || !errors.Is(err, ErrClusterMismatch) || mismatch.PeerCluster != tc.listener {
						t.Fatalf("dial across clusters: %v, want a ClusterMismatchError naming %q", err, tc.listener)
					}
					select {
					case in := <-to.raftConns:
						in.Close()
						t.Fatal("a refused connection was handed to raft")
					case in := <-to.apiConns:
						in.Close()
						t.Fatal("a refused connection was handed to the forwarded-call server")
					case <-time.After(100 * time.Millisecond):
					}
					if got := logged.String(); !strings.Contains(got, "peer connection refused") || !strings.Contains(got, "another cluster") {
						t.Errorf("the listener logged %q, want the refusal and its reason", got)
					}
					return
				}
				if err != nil {
					t.Fatalf("dial: %v", err)
				}
				defer c.Close()
				var in net.Conn
				if kind == KindRaft {
					in, err = to.Accept()
				} else {
					in, err = to.APIListener().Accept()
				}
				if err != nil {
					t.Fatal(err)
				}
				defer in.Close()
				if _, err := c.Write([]byte("x")); err != nil {
					t.Fatal(err)
				}
				b := make([]byte, 1)
				in.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := io.ReadFull(in, b); err != nil || b[0] != 'x' {
					t.Fatalf("the accepted connection read %q, %v", b, err)
				}
			})
		}
	}
}
