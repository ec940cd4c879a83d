package peers

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencedio/fenced/internal/testutil"
	"github.com/hashicorp/raft"
)

// fakeSelf is a peer port's node with a fixed hello.
type fakeSelf struct{ h Hello }

func (f *fakeSelf) Hello() Hello { return f.h }
func (f *fakeSelf) Checker() func(Hello, string) error {
	return func(Hello, string) error { return nil }
}
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

// A member's identity and its raft log carry one log ID: an identity whose
// log is gone, or another directory's, is a lost directory and is refused;
// so is a log whose identity file is gone. Nothing is written by a refusal.
func TestIdentityIsBoundToItsLog(t *testing.T) {
	type dir struct {
		path string
		log  *raft.InmemStore
	}
	fresh := func(t *testing.T) dir {
		d := dir{t.TempDir(), raft.NewInmemStore()}
		if _, err := OpenIdentity(d.path, d.log, false); err != nil {
			t.Fatal(err)
		}
		return d
	}
	legacy := func(t *testing.T, id Identity) dir {
		d := dir{t.TempDir(), raft.NewInmemStore()}
		b, _ := json.Marshal(id)
		if err := os.WriteFile(filepath.Join(d.path, IdentityFileName), b, 0o600); err != nil {
			t.Fatal(err)
		}
		return d
	}
	for _, tc := range []struct {
		name     string
		setup    func(t *testing.T) dir
		hasState bool
		refused  string // "" when the directory opens
	}{
		{"reopened", fresh, true, ""},
		{"log lost, identity kept", func(t *testing.T) dir {
			d := fresh(t)
			d.log = raft.NewInmemStore()
			return d
		}, false, "holds no raft log with an ID"},
		{"another directory's log", func(t *testing.T) dir {
			d, other := fresh(t), fresh(t)
			d.log = other.log
			return d
		}, true, "come from different data directories"},
		{"identity lost, log kept", func(t *testing.T) dir {
			d := fresh(t)
			if err := os.Remove(filepath.Join(d.path, IdentityFileName)); err != nil {
				t.Fatal(err)
			}
			return d
		}, true, "is missing"},
		{"identity from before log IDs, log kept", func(t *testing.T) dir {
			return legacy(t, Identity{Instance: "i1", Cluster: "c1", Votes: true})
		}, true, ""},
		{"identity from before log IDs, log lost", func(t *testing.T) dir {
			return legacy(t, Identity{Instance: "i1", Cluster: "c1", Votes: true})
		}, false, "holds no raft state"},
		{"identity from before log IDs, log of a newer identity", func(t *testing.T) dir {
			d := legacy(t, Identity{Instance: "i1", Cluster: "c1", Votes: true})
			d.log.Set(LogIDKey, []byte("0123"))
			return d
		}, true, "names none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.setup(t)
			before, _ := os.ReadFile(filepath.Join(d.path, IdentityFileName))
			logBefore, _ := d.log.Get(LogIDKey)
			s, err := OpenIdentity(d.path, d.log, tc.hasState)
			if tc.refused != "" {
				if !errors.Is(err, ErrLostLog) || !strings.Contains(err.Error(), tc.refused) || !strings.Contains(err.Error(), "fencectl member remove") {
					t.Fatalf("open: %v, want ErrLostLog saying %q and the recovery", err, tc.refused)
				}
				after, _ := os.ReadFile(filepath.Join(d.path, IdentityFileName))
				logAfter, _ := d.log.Get(LogIDKey)
				if string(after) != string(before) || string(logAfter) != string(logBefore) {
					t.Errorf("a refused open wrote: identity %q -> %q, log ID %q -> %q", before, after, logBefore, logAfter)
				}
				return
			}
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			logID, _ := d.log.Get(LogIDKey)
			if id := s.Get(); id.LogID == "" || string(logID) != id.LogID {
				t.Fatalf("identity %+v, log ID %q: not bound", id, logID)
			}
			if _, err := OpenIdentity(d.path, d.log, tc.hasState); err != nil {
				t.Fatalf("reopened: %v", err)
			}
		})
	}
}

// A new directory's identity votes only if it holds raft state from before
// identity files (and then binds that log).
func TestNewIdentityVotesOnlyWithOldState(t *testing.T) {
	for _, hasState := range []bool{false, true} {
		s, err := OpenIdentity(t.TempDir(), raft.NewInmemStore(), hasState)
		if err != nil {
			t.Fatal(err)
		}
		if s.Votes() != hasState {
			t.Errorf("new identity with raft state %v: votes %v", hasState, s.Votes())
		}
	}
}
