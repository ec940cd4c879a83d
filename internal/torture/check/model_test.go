package check

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencedio/fenced/internal/torture/history"
)

// hb builds histories for one key with explicit times (milliseconds).
type hb struct {
	ops []*history.Op
	n   int64
}

func (b *hb) add(worker int, call, ret int64, op history.Op) *hb {
	b.n++
	op.Worker, op.Seq, op.Call, op.Return = worker, b.n, call*1e6, ret*1e6
	if op.Key == "" {
		op.Key = "k"
	}
	if op.TTLMs == 0 && op.Kind == history.KindAcquire {
		op.TTLMs = 1000
	}
	if ret == 0 {
		op.Return = 0
	}
	b.ops = append(b.ops, &op)
	return b
}

func acquired(owner string, token uint64) history.Op {
	return history.Op{Kind: history.KindAcquire, Owner: owner, Token: token, Outcome: history.OK}
}
func heldBy(owner, holder string, token uint64) history.Op {
	return history.Op{Kind: history.KindAcquire, Owner: owner, Outcome: history.Fail, Code: history.CodeHeld, Holder: holder, HolderToken: token}
}
func acquireUnknown(owner string) history.Op {
	return history.Op{Kind: history.KindAcquire, Owner: owner, Outcome: history.Unknown, Code: history.CodeTransport}
}
func renewed(owner string, token uint64) history.Op {
	return history.Op{Kind: history.KindRenew, Owner: owner, Token: token, Outcome: history.OK}
}
func renewRefused(owner string) history.Op {
	return history.Op{Kind: history.KindRenew, Owner: owner, Outcome: history.Fail, Code: history.CodeNotFound}
}
func released(owner string) history.Op {
	return history.Op{Kind: history.KindRelease, Owner: owner, Outcome: history.OK}
}
func readFree(last uint64) history.Op {
	return history.Op{Kind: history.KindGet, Outcome: history.OK, LastToken: last}
}
func readHeld(holder string, token uint64) history.Op {
	return history.Op{Kind: history.KindGet, Outcome: history.OK, HasLease: true, Holder: holder, HolderToken: token, LastToken: token}
}

func TestLeaseModel(t *testing.T) {
	tests := []struct {
		name string
		h    *hb
		want porcupine.CheckResult
	}{
		{"acquire renew release acquire", new(hb).
			add(0, 0, 1, acquired("a", 5)).add(0, 2, 3, renewed("a", 5)).add(0, 4, 5, released("a")).
			add(1, 6, 7, readFree(5)).add(1, 8, 9, acquired("b", 9)), porcupine.Ok},
		{"token not above the previous one", new(hb).
			add(0, 0, 1, acquired("a", 5)).add(0, 2, 3, released("a")).add(1, 4, 5, acquired("b", 5)), porcupine.Illegal},
		{"grant to another while the holder renews", new(hb).
			add(0, 0, 1, acquired("a", 5)).add(1, 2, 3, acquired("b", 9)).add(0, 4, 5, renewed("a", 5)), porcupine.Illegal},
		{"expiry lets another acquire", new(hb).
			add(0, 0, 1, acquired("a", 5)).add(1, 2, 3, acquired("b", 9)).add(0, 4, 5, renewRefused("a")), porcupine.Ok},
		{"renew returns another token", new(hb).
			add(0, 0, 1, acquired("a", 5)).add(0, 2, 3, renewed("a", 6)), porcupine.Illegal},
		{"read after a grant says free with last 0", new(hb).
			add(0, 0, 1, acquired("a", 5)).add(1, 2, 3, readFree(0)), porcupine.Illegal},
		{"read of a held key", new(hb).
			add(0, 0, 1, acquired("a", 5)).add(1, 2, 3, readHeld("a", 5)).add(1, 4, 5, heldBy("b", "a", 5)), porcupine.Ok},
		{"held by someone who never acquired", new(hb).
			add(0, 0, 1, acquired("a", 5)).add(1, 2, 3, heldBy("b", "ghost", 5)), porcupine.Illegal},
		{"concurrent grants may linearize either way", new(hb).
			add(0, 0, 10, acquired("a", 5)).add(1, 1, 9, heldBy("b", "a", 5)), porcupine.Ok},
		{"unknown acquisition revealed by a read", new(hb).
			add(0, 0, 0, acquireUnknown("a")).add(1, 5, 6, readHeld("a", 7)).add(1, 7, 8, acquired("b", 11)), porcupine.Ok},
		{"unknown acquisition revealed with a token below the last", new(hb).
			add(1, 0, 1, acquired("b", 9)).add(1, 2, 3, released("b")).
			add(0, 4, 0, acquireUnknown("a")).add(1, 5, 6, heldBy("c", "a", 7)), porcupine.Illegal},
		{"unknown acquisition that never happened", new(hb).
			add(0, 0, 0, acquireUnknown("a")).add(1, 5, 6, readFree(0)), porcupine.Ok},
		{"free key read after an unknown grant must show its token", new(hb).
			add(1, 0, 1, acquired("b", 3)).add(1, 1, 2, released("b")).
			add(0, 2, 0, acquireUnknown("a")).add(1, 5, 6, readHeld("a", 7)).add(1, 8, 9, readFree(3)), porcupine.Illegal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := history.NewHistory(tt.h.ops)
			res := LinearizablePerKey(h, 10*time.Second, "")
			if len(res) != 1 {
				t.Fatalf("got %d partitions, want 1", len(res))
			}
			if res[0].Result != tt.want {
				t.Errorf("result %s, want %s", res[0].Result, tt.want)
			}
		})
	}
}

func TestLeaseModelPartitionsByKey(t *testing.T) {
	// Each key alone is fine; they only look wrong if mixed together.
	b := new(hb).add(0, 0, 1, history.Op{Kind: history.KindAcquire, Key: "x", Owner: "a", Token: 5, Outcome: history.OK}).
		add(1, 2, 3, history.Op{Kind: history.KindAcquire, Key: "y", Owner: "b", Token: 7, Outcome: history.OK}).
		add(0, 4, 5, history.Op{Kind: history.KindRenew, Key: "x", Owner: "a", Token: 5, Outcome: history.OK})
	res := LinearizablePerKey(history.NewHistory(b.ops), 10*time.Second, "")
	if len(res) != 2 {
		t.Fatalf("got %d partitions, want 2", len(res))
	}
	for _, r := range res {
		if r.Result != porcupine.Ok {
			t.Errorf("key %s: %s, want Ok", r.Key, r.Result)
		}
	}
}

func TestLinearizabilityFailureWritesVisualization(t *testing.T) {
	dir := t.TempDir()
	b := new(hb).add(0, 0, 1, acquired("a", 5)).add(1, 2, 3, readFree(0))
	res, _ := Linearizability(history.NewHistory(b.ops), 10*time.Second, dir)
	if res.Violations != 1 {
		t.Fatalf("violations = %d, want 1 (%v)", res.Violations, res.Examples)
	}
	_, per := Linearizability(history.NewHistory(b.ops), 10*time.Second, dir)
	path := per[0].Visualization
	if path == "" {
		t.Fatal("no visualization written")
	}
	info, err := os.Stat(path)
	if err != nil || info.Size() == 0 {
		t.Fatalf("visualization %s: %v", path, err)
	}
	if ex := per[0].Explanation; !strings.Contains(ex, "impossible") || !strings.Contains(ex, "get -> free, last 0") {
		t.Errorf("explanation does not name the stale read:\n%s", ex)
	}
	if per[0].FirstIllegal != 3e6 {
		t.Errorf("first illegal at %d, want the stale read's return (3ms)", per[0].FirstIllegal)
	}
}

func TestLeaseOperationsDropUninformativeAnswers(t *testing.T) {
	b := new(hb).
		add(0, 0, 1, history.Op{Kind: history.KindAcquire, Owner: "a", Outcome: history.Fail, Code: history.CodeRefused}).
		add(0, 2, 3, history.Op{Kind: history.KindRenew, Owner: "a", Outcome: history.Unknown}).
		add(0, 4, 5, history.Op{Kind: history.KindRelease, Owner: "a", Outcome: history.Unknown}).
		add(0, 6, 7, history.Op{Kind: history.KindGet, Outcome: history.Fail, Code: history.CodeUnavailable}).
		add(0, 8, 9, history.Op{Kind: history.KindPut, Token: 3, Outcome: history.OK}).
		add(0, 10, 0, history.Op{Kind: history.KindAcquire, Owner: "b"}) // invoked, never answered
	h := history.NewHistory(b.ops)
	ops := leaseOperations(h)
	if len(ops) != 1 {
		t.Fatalf("kept %d operations, want only the unanswered acquisition: %+v", len(ops), ops)
	}
	if ops[0].Output.(leaseOutput).Result != resUnknown || ops[0].Return <= h.End {
		t.Errorf("unanswered acquisition = %+v, want unknown and pending past the end (%d)", ops[0], h.End)
	}
}

// TestLinearizableWindows: a history cut into windows at quiescent points
// keeps what the operations before a cut say about the key.
func TestLinearizableWindows(t *testing.T) {
	defer func(n int) { windowOps = n }(windowOps)
	windowOps = 1
	tests := []struct {
		name string
		h    *hb
		want porcupine.CheckResult
	}{
		{"a stale read after the cut", new(hb).
			add(0, 0, 1, acquired("a", 5)).add(0, 2, 3, released("a")).
			add(1, 4, 5, readFree(5)).add(1, 6, 7, readFree(0)), porcupine.Illegal},
		{"the holder carried over the cut", new(hb).
			add(0, 0, 1, acquired("a", 5)).add(0, 2, 3, renewed("a", 5)).
			add(1, 4, 5, heldBy("b", "a", 5)).add(0, 6, 7, renewed("a", 5)), porcupine.Ok},
		{"a token going back after the cut", new(hb).
			add(0, 0, 1, acquired("a", 5)).add(0, 2, 3, released("a")).
			add(1, 4, 5, acquired("b", 9)).add(1, 6, 7, released("b")).add(2, 8, 9, acquired("c", 7)), porcupine.Illegal},
		{"an unnamed acquisition of unknown outcome raises the last token", new(hb).
			add(0, 0, 1, acquired("a", 5)).add(0, 2, 3, released("a")).add(2, 3, 0, acquireUnknown("g")).
			add(1, 4, 5, readFree(5)).add(1, 6, 7, readFree(8)), porcupine.Ok},
		{"a named acquisition of unknown outcome holds across the cut", new(hb).
			add(2, 0, 0, acquireUnknown("g")).add(0, 1, 2, heldBy("a", "g", 4)).add(0, 3, 4, readHeld("g", 4)).
			add(1, 5, 6, readHeld("g", 4)).add(1, 7, 8, acquired("b", 9)), porcupine.Ok},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := LinearizablePerKey(history.NewHistory(tt.h.ops), 10*time.Second, "")
			if len(res) != 1 || res[0].Windows < 2 {
				t.Fatalf("got %+v, want one key checked in at least two windows", res)
			}
			if res[0].Result != tt.want {
				t.Errorf("result %s, want %s", res[0].Result, tt.want)
			}
		})
	}
}
