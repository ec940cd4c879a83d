package peers

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// A peer whose log ends before what it acknowledged is refused as rolled
// back, also after this member restarts; a peer that moved on to a newer
// term (raft truncated entries it had not committed) or started on a new
// data directory is not.
func TestAcksRefuseRolledBackPeer(t *testing.T) {
	store := raft.NewInmemStore()
	a, err := OpenAcks(store)
	if err != nil {
		t.Fatal(err)
	}
	hello := func(instance string, term, index uint64) Hello {
		return Hello{Node: "n2", Instance: instance, LastTerm: term, LastIndex: index}
	}
	if err := a.Checker()(hello("i2", 1, 5), "addr"); err != nil {
		t.Fatal(err)
	}
	a.Note("n2", Position{2, 40})
	a.Note("n2", Position{2, 30}) // an older answer, late
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	a, err = OpenAcks(store)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		h       Hello
		refused bool
	}{
		{hello("i2", 2, 39), true},
		{hello("i2", 1, 90), true},
		{hello("i2", 2, 40), false},
		{hello("i2", 3, 12), false},
		{hello("i2", 0, 0), false}, // says nothing of its log
	} {
		err := a.Checker()(tc.h, "127.0.0.2:7421")
		var rb *RolledBackError
		if tc.refused != errors.As(err, &rb) || tc.refused != errors.Is(err, ErrRolledBack) {
			t.Errorf("hello %+v: %v, refused want %v", tc.h, err, tc.refused)
		}
		if tc.refused && (rb.Acknowledged != Position{2, 40} || a.Refused()["n2"] == "") {
			t.Errorf("refusal %+v, refused peers %v", rb, a.Refused())
		}
		if !tc.refused && len(a.Refused()) != 0 {
			t.Errorf("after an accepted hello, refused peers %v", a.Refused())
		}
	}
	// A new data directory of n2 (removed and added back) starts afresh.
	if err := a.Checker()(hello("i3", 1, 1), "addr"); err != nil {
		t.Errorf("n2 on a new data directory: %v", err)
	}
}

// Only acknowledgements noted before the hello went out count: the peer
// looked where its log ends once it had read the hello, and an entry it
// acknowledged on another connection meanwhile may come after that.
func TestAcksCountOnlyWhatCameBeforeTheHello(t *testing.T) {
	a, err := OpenAcks(raft.NewInmemStore())
	if err != nil {
		t.Fatal(err)
	}
	at := func(index uint64) Hello { return Hello{Node: "n2", Instance: "i2", LastTerm: 2, LastIndex: index} }
	if err := a.Checker()(at(3), "addr"); err != nil {
		t.Fatal(err)
	}
	check := a.Checker() // the hello goes out
	a.Note("n2", Position{2, 5})
	if err := check(at(3), "addr"); err != nil {
		t.Errorf("an answer sampled before an acknowledgement noted after the hello was refused: %v", err)
	}
	if err := a.Checker()(at(3), "addr"); !errors.Is(err, ErrRolledBack) {
		t.Errorf("a later hello's answer behind index 5: %v, want ErrRolledBack", err)
	}
}

// ackSelf is a peer port's node that checks peers against acks.
type ackSelf struct {
	fakeSelf
	acks *Acks
}

func (s *ackSelf) Checker() func(Hello, string) error { return s.acks.Checker() }

// A member dialing a peer that acknowledged entries its log no longer
// holds refuses the connection before raft sees it. The member accepting a
// connection from that peer does not check it (it cannot order the
// peer's hello against its acknowledgements).
func TestPeerPortRefusesRolledBackPeer(t *testing.T) {
	acks, err := OpenAcks(raft.NewInmemStore())
	if err != nil {
		t.Fatal(err)
	}
	rolledBack := Hello{Cluster: "c1", Node: "n2", Instance: "i2", LastTerm: 2, LastIndex: 30}
	if err := acks.Checker()(rolledBack, ""); err != nil {
		t.Fatal(err)
	}
	acks.Note("n2", Position{2, 40})
	listener, err := Listen("127.0.0.1:0", "", nil, slog.New(slog.DiscardHandler), &ackSelf{fakeSelf{Hello{Cluster: "c1", Node: "n1", Instance: "i1"}}, acks})
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	dialer, err := Listen("127.0.0.1:0", "", nil, slog.New(slog.DiscardHandler), &fakeSelf{rolledBack})
	if err != nil {
		t.Fatal(err)
	}
	defer dialer.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := dialer.DialKind(ctx, listener.Addr().String(), KindRaft)
	if err != nil {
		t.Fatalf("the rolled-back peer dialing: %v, want the connection", err)
	}
	c.Close()
	// The listener, dialing the rolled-back peer, refuses its answer.
	if _, err := listener.DialKind(ctx, dialer.Addr().String(), KindRaft); !errors.Is(err, ErrRolledBack) {
		t.Fatalf("dial to the rolled-back peer: %v, want ErrRolledBack", err)
	}
}
