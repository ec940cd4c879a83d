package membership

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencedio/fenced/server/internal/peers"
	"github.com/hashicorp/raft"
)

// statuses answers Status from a table of hellos by address; an address
// not in it does not answer.
type statuses struct {
	mu     sync.Mutex
	hellos map[string]peers.Hello
	asked  map[string]int
}

func (s *statuses) set(addr string, h peers.Hello) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hellos[addr] = h
}

func (s *statuses) Status(ctx context.Context, addr string) (peers.Hello, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked[addr]++
	h, ok := s.hellos[addr]
	if !ok {
		return peers.Hello{}, errors.New("connection refused")
	}
	return h, nil
}

func newStatuses() *statuses {
	return &statuses{hellos: map[string]peers.Hello{}, asked: map[string]int{}}
}

var pair = []Peer{{"n1", "127.0.0.1:7421"}, {"n2", "127.0.0.1:7423"}}

func TestBootstrapClusterOfOne(t *testing.T) {
	n := newLeader(t, "n1")
	id := n.ident.Get()
	if !id.Votes || id.Cluster != peers.FormationID(map[string]string{"n1": id.Instance}) {
		t.Errorf("identity of a cluster of one: %+v", id)
	}
	if s := n.servers(t); len(s) != 1 || s["n1"].Address != n.addr || s["n1"].Suffrage != raft.Voter {
		t.Errorf("configuration %v", s)
	}
}

func TestBootstrapJoiningWaits(t *testing.T) {
	for _, cfg := range []Config{{NodeID: "n2", Join: true}, {NodeID: "n2", Existing: true, InitialCluster: pair}} {
		n := newTestNode(t, "n2")
		if form, err := n.formation(cfg).Bootstrap(); err != nil || form {
			t.Fatalf("%+v: form %v, err %v", cfg, form, err)
		}
		if s := n.servers(t); len(s) != 0 || n.ident.Votes() {
			t.Errorf("%+v: a joining node bootstrapped %v, votes %v", cfg, s, n.ident.Votes())
		}
	}
}

func TestFormWaitsForEveryMember(t *testing.T) {
	n := newTestNode(t, "n1")
	st := newStatuses()
	f := n.formation(Config{NodeID: "n1", InitialCluster: pair})
	f.Status = st.Status
	if form, err := f.Bootstrap(); err != nil || !form {
		t.Fatalf("bootstrap of two: form %v, err %v", form, err)
	}
	done := make(chan error, 1)
	go func() { done <- f.Form(context.Background()) }()
	time.Sleep(3 * formRetry)
	if s := n.servers(t); len(s) != 0 {
		t.Fatalf("bootstrapped %v before n2 answered", s)
	}
	st.set("127.0.0.1:7423", peers.Hello{Node: "n2", Instance: "i2"})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	me := n.ident.Get()
	if want := peers.FormationID(map[string]string{"n1": me.Instance, "n2": "i2"}); !me.Votes || me.Cluster != want {
		t.Errorf("identity %+v, want cluster %s", me, want)
	}
	s := n.servers(t)
	if len(s) != 2 || s["n2"].Address != "127.0.0.1:7423" || s["n2"].Suffrage != raft.Voter {
		t.Errorf("configuration %v", s)
	}
}

func TestFormJoinsAFormedCluster(t *testing.T) {
	n := newTestNode(t, "n1")
	st := newStatuses()
	f := n.formation(Config{NodeID: "n1", InitialCluster: pair})
	f.Status = st.Status
	initial := map[string]string{"n1": n.ident.Get().Instance, "n2": "i2"}
	st.set("127.0.0.1:7423", peers.Hello{Node: "n2", Instance: "i2", Votes: true, HasState: true, Cluster: "c1", Initial: initial})
	if err := f.Form(context.Background()); err != nil {
		t.Fatal(err)
	}
	if me := n.ident.Get(); !me.Votes || me.Cluster != "c1" {
		t.Errorf("identity %+v, want a voter of c1", me)
	}
	if s := n.servers(t); len(s) != 2 {
		t.Errorf("configuration %v", s)
	}
}

func TestFormRefuses(t *testing.T) {
	for _, tt := range []struct {
		name  string
		hello peers.Hello
		is    error
		msg   string
	}{
		{name: "formed without this instance", hello: peers.Hello{Node: "n2", HasState: true, Cluster: "c1", Initial: map[string]string{"n1": "old", "n2": "i2"}},
			is: peers.ErrMemberBootstrapped},
		{name: "another node at the address", hello: peers.Hello{Node: "n9"}, msg: "check --initial-cluster"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := newTestNode(t, "n1")
			st := newStatuses()
			st.set("127.0.0.1:7423", tt.hello)
			f := n.formation(Config{NodeID: "n1", InitialCluster: pair})
			f.Status = st.Status
			err := f.Form(context.Background())
			if err == nil || (tt.is != nil && !errors.Is(err, tt.is)) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("Form: %v", err)
			}
			if s := n.servers(t); len(s) != 0 || n.ident.Votes() {
				t.Errorf("refused, yet bootstrapped %v, votes %v", s, n.ident.Votes())
			}
		})
	}
}

func TestFormEndsWithContext(t *testing.T) {
	n := newTestNode(t, "n1")
	f := n.formation(Config{NodeID: "n1", InitialCluster: pair})
	f.Status = newStatuses().Status
	ctx, cancel := context.WithTimeout(context.Background(), 2*formRetry)
	defer cancel()
	if err := f.Form(ctx); err != nil {
		t.Fatalf("Form: %v", err)
	}
	if s := n.servers(t); len(s) != 0 {
		t.Errorf("bootstrapped %v", s)
	}
}
