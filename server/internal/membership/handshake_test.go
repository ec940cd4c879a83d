package membership

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/fencedio/fenced/server/internal/apierr"
	"github.com/fencedio/fenced/server/internal/peers"
	"github.com/hashicorp/raft"
)

func TestHandshakeHello(t *testing.T) {
	store := raft.NewInmemStore()
	ident, err := peers.OpenIdentity(t.TempDir(), store, false)
	if err != nil {
		t.Fatal(err)
	}
	h := &Handshake{Config: Config{NodeID: "n2", Existing: true}, Ident: ident, Stable: store, Logs: store, Log: quiet}
	got := h.Hello()
	if got.Node != "n2" || got.Instance != ident.Get().Instance || got.Votes || got.HasState || !got.Joining || got.Cluster != "" {
		t.Errorf("hello of a new joining member: %+v", got)
	}
	if err := store.SetUint64([]byte("CurrentTerm"), 3); err != nil {
		t.Fatal(err)
	}
	if !h.Hello().HasState {
		t.Error("a term written: no HasState")
	}
	store = raft.NewInmemStore()
	if err := store.StoreLog(&raft.Log{Index: 1, Term: 1}); err != nil {
		t.Fatal(err)
	}
	h.Stable, h.Logs = store, store
	if !h.Hello().HasState {
		t.Error("a log written: no HasState")
	}
}

func TestHandshakeAdmit(t *testing.T) {
	dir := t.TempDir()
	store := raft.NewInmemStore()
	ident, err := peers.OpenIdentity(dir, store, false)
	if err != nil {
		t.Fatal(err)
	}
	h := &Handshake{Config: Config{NodeID: "n2", Join: true}, Ident: ident, Stable: store, Logs: store, Log: quiet}
	initial := map[string]string{"n1": "i1"}
	if err := h.Admit(peers.Hello{Node: "n1", Cluster: "c1", Initial: initial, Admit: "n3"}); !errors.Is(err, apierr.ErrMemberNotAddable) {
		t.Fatalf("admission of another member: %v", err)
	}
	if ident.Votes() {
		t.Fatal("votes after an admission of another member")
	}
	if err := h.Admit(peers.Hello{Node: "n1", Cluster: "c1", Initial: initial, Admit: "n2"}); err != nil {
		t.Fatal(err)
	}
	if got := h.Hello(); !got.Votes || got.Cluster != "c1" || got.Initial["n1"] != "i1" {
		t.Errorf("hello after admission: %+v", got)
	}
	// The admission is in the data directory.
	again, err := peers.OpenIdentity(dir, store, false)
	if err != nil {
		t.Fatal(err)
	}
	if id := again.Get(); !id.Votes || id.Cluster != "c1" {
		t.Errorf("identity %s after admission: %+v", filepath.Join(dir, peers.IdentityFileName), id)
	}
	if err := h.Admit(peers.Hello{Node: "x1", Cluster: "c2", Admit: "n2"}); !errors.Is(err, peers.ErrClusterMismatch) {
		t.Errorf("admission into another cluster: %v", err)
	}
}
