package lease_test

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/fencedio/fenced/lease"
	"pgregory.net/rapid"
)

// TestStateProperties drives the state machine with random commands, with
// snapshot and restore in between, against a simple model.
func TestStateProperties(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		maxIdle := rapid.IntRange(1, 4).Draw(t, "maxIdle")
		s := lease.New(maxIdle)
		keys := []string{"a", "b", "c", "orders/7", "ü/κ"}
		var (
			index   uint64
			nextID  int
			holder  = map[string]lease.Lease{}   // model: current lease per key
			last    = map[string]uint64{}        // highest token ever granted per key
			issued  = map[string][]lease.Lease{} // every grant, to replay stale IDs
			maxSeen uint64
		)
		oldView, oldList := s.View(), []lease.Lease(nil)
		steps := rapid.IntRange(1, 200).Draw(t, "steps")
		for i := 0; i < steps; i++ {
			key := rapid.SampledFrom(keys).Draw(t, "key")
			switch rapid.IntRange(0, 6).Draw(t, "op") {
			case 0, 1: // acquire
				index += uint64(rapid.IntRange(1, 3).Draw(t, "gap")) // other entries in between
				nextID++
				id := fmt.Sprintf("id%d", nextID)
				res := s.Apply(index, 0, lease.Command{Op: lease.OpAcquire, Key: key, ID: id, Owner: "o", TTL: time.Second})
				if cur, held := holder[key]; held {
					var he *lease.HeldError
					if !errors.As(res.Err, &he) || he.Token != cur.Token || he.Owner != cur.Owner {
						t.Fatalf("acquire of held %q: got %v, want HeldError for token %d", key, res.Err, cur.Token)
					}
					continue
				}
				if res.Err != nil || res.Event.Type != lease.Acquired {
					t.Fatalf("acquire of free %q: %+v", key, res)
				}
				got := res.Event.Lease
				if got.Token <= last[key] || got.Token <= maxSeen {
					t.Fatalf("token %d for %q not above previous %d (max %d)", got.Token, key, last[key], maxSeen)
				}
				last[key], maxSeen = got.Token, got.Token
				holder[key] = got
				issued[key] = append(issued[key], got)
			case 2, 3: // release or expire, with the current or a stale ID
				index++
				op := lease.OpRelease
				if rapid.Bool().Draw(t, "expire") {
					op = lease.OpExpire
				}
				id := "never-issued"
				if past := issued[key]; len(past) > 0 {
					id = rapid.SampledFrom(past).Draw(t, "lease").ID
				}
				c := lease.Command{Op: op, Key: key, ID: id}
				if rapid.Bool().Draw(t, "handover") {
					nextID++
					c.NextID, c.Owner, c.TTL = fmt.Sprintf("id%d", nextID), "next", 2*time.Second
				}
				res := s.Apply(index, 0, c)
				if cur, held := holder[key]; held && cur.ID == id {
					if res.Err != nil || res.Event.Lease.Token != cur.Token {
						t.Fatalf("release of current lease: %+v", res)
					}
					delete(holder, key)
					if c.NextID != "" {
						got := res.Next.Lease
						if res.Next.Type != lease.Acquired || got.ID != c.NextID || got.Owner != "next" {
							t.Fatalf("handover: %+v", res.Next)
						}
						if got.Token <= last[key] || got.Token <= maxSeen {
							t.Fatalf("handover token %d for %q not above previous %d (max %d)", got.Token, key, last[key], maxSeen)
						}
						last[key], maxSeen = got.Token, got.Token
						holder[key] = got
						issued[key] = append(issued[key], got)
					}
				} else if !errors.Is(res.Err, lease.ErrNotHeld) || res.Next.Type != 0 {
					t.Fatalf("release with stale id %q of %q: got %+v, want ErrNotHeld and no handover", id, key, res)
				}
			case 6: // expiry batch, decided in this entry's term or another
				index++
				term := rapid.Uint64Range(1, 3).Draw(t, "term")
				c := lease.Command{Op: lease.OpExpireBatch, Term: term}
				if rapid.Bool().Draw(t, "wrong term") {
					c.Term = term + 1
				}
				handover := rapid.IntRange(-1, 5).Draw(t, "handover item")
				for j := range rapid.IntRange(1, 6).Draw(t, "expiries") {
					k := rapid.SampledFrom(keys).Draw(t, "key")
					e := lease.Expiry{Key: k, ID: "never-issued"}
					if past := issued[k]; len(past) > 0 {
						e.ID = rapid.SampledFrom(past).Draw(t, "lease").ID
					}
					if j == handover {
						nextID++
						e.NextID, e.Owner, e.TTL = fmt.Sprintf("%032x", nextID), "next", 3*time.Second
					}
					c.Expiries = append(c.Expiries, e)
				}
				// What the log holds is the encoding.
				b, err := c.MarshalBinary()
				if err != nil {
					t.Fatal(err)
				}
				var decoded lease.Command
				if err := decoded.UnmarshalBinary(b); err != nil || !reflect.DeepEqual(decoded, c) {
					t.Fatalf("round trip of %+v: %+v, %v", c, decoded, err)
				}
				res := s.Apply(index, term, decoded)
				if c.Term != term {
					if !errors.Is(res.Err, lease.ErrWrongTerm) || res.Items != nil {
						t.Fatalf("batch of term %d in term %d: %+v, want ErrWrongTerm and nothing done", c.Term, term, res)
					}
					break
				}
				if res.Err != nil || len(res.Items) != len(c.Expiries) || res.Event.Type != 0 || res.Next.Type != 0 {
					t.Fatalf("batch: %+v", res)
				}
				for j, e := range c.Expiries { // in order: a key may appear twice
					r := res.Items[j]
					cur, held := holder[e.Key]
					if !held || cur.ID != e.ID {
						if !errors.Is(r.Err, lease.ErrNotHeld) || r.Event.Type != 0 || r.Next.Type != 0 {
							t.Fatalf("expiry %d of a lease that is not current: %+v", j, r)
						}
						continue
					}
					if r.Err != nil || r.Event.Type != lease.Expired || r.Event.Lease != cur || r.Event.Revision != index {
						t.Fatalf("expiry %d of the current lease %+v: %+v", j, cur, r)
					}
					delete(holder, e.Key)
					if e.NextID == "" {
						if r.Next.Type != 0 {
							t.Fatalf("expiry %d handed over unasked: %+v", j, r.Next)
						}
						continue
					}
					got := r.Next.Lease
					if r.Next.Type != lease.Acquired || got.ID != e.NextID || got.Owner != "next" || got.TTL != e.TTL {
						t.Fatalf("handover in batch: %+v", r.Next)
					}
					if got.Token <= last[e.Key] || got.Token <= maxSeen {
						t.Fatalf("handover token %d for %q not above previous %d (max %d)", got.Token, e.Key, last[e.Key], maxSeen)
					}
					last[e.Key], maxSeen = got.Token, got.Token
					holder[e.Key] = got
					issued[e.Key] = append(issued[e.Key], got)
				}
			case 4: // renew: only the current ID, and the token never changes
				for _, l := range issued[key] {
					got, err := s.Current(key, l.ID)
					if cur, held := holder[key]; held && cur.ID == l.ID {
						if err != nil || got.Token != cur.Token {
							t.Fatalf("renew of current lease %q: %v, token %d want %d", l.ID, err, got.Token, cur.Token)
						}
					} else if !errors.Is(err, lease.ErrNotHeld) {
						t.Fatalf("renew with stale id %q: %v", l.ID, err)
					}
				}
			case 5: // snapshot and restore
				var buf bytes.Buffer
				if _, err := s.Snapshot().WriteTo(&buf); err != nil {
					t.Fatal(err)
				}
				restored, err := lease.Restore(&buf, maxIdle)
				if err != nil {
					t.Fatal(err)
				}
				s = restored
			}
			// At most one holder per key, and it is the model's.
			if s.Len() != len(holder) {
				t.Fatalf("state has %d leases, model %d", s.Len(), len(holder))
			}
			// Bytes is the model's leases' costs, through grants,
			// handovers, releases, expiries and restores.
			var bytes int64
			for k, l := range holder {
				bytes += lease.Cost(k, l.Owner)
			}
			if s.Bytes() != bytes {
				t.Fatalf("Bytes() = %d, the model's leases cost %d", s.Bytes(), bytes)
			}
			for k, want := range holder {
				if got, ok := s.Get(k); !ok || got != want {
					t.Fatalf("Get(%q) = %+v, %v; want %+v", k, got, ok, want)
				}
				if s.LastToken(k) != want.Token {
					t.Fatalf("LastToken(%q) = %d, want %d", k, s.LastToken(k), want.Token)
				}
			}
			if s.Applied() != index {
				t.Fatalf("Applied = %d, want %d", s.Applied(), index)
			}
			// List walks the ordered index: every prefix and limit agrees
			// with a sort of the model, and so do owner counts.
			for _, prefix := range []string{"", "a", "orders/", "ü", "z"} {
				want := modelList(holder, prefix)
				limit := rapid.IntRange(0, 6).Draw(t, "limit")
				if limit > 0 && len(want) > limit {
					want = want[:limit]
				}
				if got := s.List(prefix, limit); !slices.Equal(got, want) {
					t.Fatalf("List(%q, %d) = %+v, want %+v", prefix, limit, got, want)
				}
			}
			owners := map[string]int{}
			for _, l := range holder {
				owners[l.Owner]++
			}
			for _, o := range []string{"o", "next", "other"} {
				if s.OwnerLen(o) != owners[o] {
					t.Fatalf("OwnerLen(%q) = %d, want %d", o, s.OwnerLen(o), owners[o])
				}
			}
			// A view taken earlier is frozen: later commands do not show.
			if got := oldView.List("", 0); !slices.Equal(got, oldList) {
				t.Fatalf("view taken at %d changed: %+v, want %+v", oldView.Applied(), got, oldList)
			}
			if rapid.Bool().Draw(t, "new view") {
				oldView, oldList = s.View(), modelList(holder, "")
			}
		}
	})
}

func TestForgetsIdleKeys(t *testing.T) {
	t.Parallel()
	const keys = 1_000_000
	s := lease.New(1000)
	var index uint64
	for i := 0; i < keys; i++ {
		k := fmt.Sprintf("k%d", i)
		index++
		if r := s.Apply(index, 0, lease.Command{Op: lease.OpAcquire, Key: k, ID: "x", TTL: time.Second}); r.Err != nil {
			t.Fatal(r.Err)
		}
		index++
		if r := s.Apply(index, 0, lease.Command{Op: lease.OpRelease, Key: k, ID: "x"}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	snap := s.Snapshot()
	var buf bytes.Buffer
	if _, err := snap.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	// 1000 remembered keys of ~8 bytes plus tokens; far from a million entries.
	if buf.Len() > 64<<10 {
		t.Fatalf("snapshot after %d idle keys is %d bytes; idle keys are not forgotten", keys, buf.Len())
	}
	if got := s.LastToken("k0"); got != 0 {
		t.Fatalf("oldest key still remembered with token %d", got)
	}
	if got := s.LastToken(fmt.Sprintf("k%d", keys-1)); got != index-1 {
		t.Fatalf("newest key LastToken = %d, want %d", got, index-1)
	}
	// A forgotten key still gets a token above every token issued before.
	index++
	r := s.Apply(index, 0, lease.Command{Op: lease.OpAcquire, Key: "k0", ID: "y", TTL: time.Second})
	if r.Err != nil || r.Event.Lease.Token <= 2 {
		t.Fatalf("reacquire forgotten key: %+v", r)
	}
}

func TestCommandRoundTrip(t *testing.T) {
	t.Parallel()
	for _, c := range []lease.Command{
		{Op: lease.OpAcquire, Key: "orders/7", ID: "0123456789abcdef0123456789abcdef", Owner: "A", TTL: 10 * time.Second},
		{Op: lease.OpRelease, Key: "k", ID: "id"},
		{Op: lease.OpExpire, Key: "ü", ID: "id"},
		{Op: lease.OpRelease, Key: "k", ID: "id", NextID: "next", Owner: "B", TTL: time.Second},
		{Op: lease.OpExpireBatch, Term: 1, Expiries: []lease.Expiry{{Key: "k", ID: "0123456789abcdef0123456789abcdef"}}},
		{Op: lease.OpExpireBatch, Term: 1 << 40, Expiries: []lease.Expiry{
			{Key: "a", ID: "not-hex"},
			{Key: "b", ID: "ABCDEF"}, // upper case: kept as text
			{Key: "c", ID: "abc"},    // odd length: kept as text
			{Key: "ü", ID: "00ff", NextID: "0123456789abcdef0123456789abcdef", Owner: "B", TTL: 1500 * time.Millisecond},
			{Key: "a", ID: ""},
		}},
	} {
		b, err := c.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var got lease.Command
		if err := got.UnmarshalBinary(b); err != nil || !reflect.DeepEqual(got, c) {
			t.Fatalf("round trip of %+v: %+v, %v", c, got, err)
		}
		for i := 0; i < len(b); i++ {
			var short lease.Command
			if err := short.UnmarshalBinary(b[:i]); !errors.Is(err, lease.ErrBadCommand) {
				t.Fatalf("truncated to %d bytes: %v", i, err)
			}
		}
	}
}

// An expiry batch costs little more than its keys: no per-expiry header,
// and the server's hex lease IDs take the 16 bytes they spell.
func TestExpiryBatchIsCompact(t *testing.T) {
	t.Parallel()
	c := lease.Command{Op: lease.OpExpireBatch, Term: 12345}
	const n = 1000
	for i := range n {
		c.Expiries = append(c.Expiries, lease.Expiry{Key: fmt.Sprintf("jobs/%06d", i), ID: fmt.Sprintf("%032x", i*7919)})
	}
	b, err := c.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	// Per expiry: 1+11 for the key, 1+16 for the ID, 1 for no handover.
	if want := n*30 + 16; len(b) > want {
		t.Fatalf("%d expiries take %d bytes, want at most %d", n, len(b), want)
	}
}

func TestCommandRejects(t *testing.T) {
	t.Parallel()
	hex := strings.Repeat("ab", 16)
	two := lease.Command{Op: lease.OpExpireBatch, Term: 1, Expiries: []lease.Expiry{
		{Key: "a", ID: hex, NextID: hex, Owner: "o", TTL: time.Second},
		{Key: "b", ID: hex, NextID: hex, Owner: "o", TTL: time.Second},
	}}
	empty := lease.Command{Op: lease.OpExpireBatch, Term: 1}
	for name, c := range map[string]lease.Command{"two handovers": two, "empty": empty} {
		if _, err := c.MarshalBinary(); !errors.Is(err, lease.ErrBadCommand) {
			t.Errorf("encoding a batch with %s: %v, want ErrBadCommand", name, err)
		}
		// Nor does the state machine apply one, however it got there.
		s := lease.New(0)
		s.Apply(1, 1, lease.Command{Op: lease.OpAcquire, Key: "a", ID: hex, TTL: time.Second})
		if r := s.Apply(2, 1, c); !errors.Is(r.Err, lease.ErrBadCommand) || r.Items != nil || s.Len() != 1 {
			t.Errorf("applying a batch with %s: %+v, %d leases", name, r, s.Len())
		}
	}
	ok, err := lease.Command{Op: lease.OpExpireBatch, Term: 1, Expiries: []lease.Expiry{{Key: "k", ID: hex}}}.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"batch op in the old layout":   {2, byte(lease.OpExpireBatch), 1, 'k', 2, 'i', 'd', 0, 0, 0},
		"other op in the batch layout": append([]byte{ok[0], byte(lease.OpExpire)}, ok[2:]...),
		"count beyond the entry":       {ok[0], ok[1], 1, 200, 1},
		"odd packed id":                {ok[0], ok[1], 1, 1, 1, 'k', 3, 0xab, 0},
		"trailing bytes":               append(append([]byte(nil), ok...), 0),
		"unknown version":              {9, byte(lease.OpAcquire)},
	} {
		var c lease.Command
		if err := c.UnmarshalBinary(b); !errors.Is(err, lease.ErrBadCommand) {
			t.Errorf("%s: %v, want ErrBadCommand", name, err)
		}
	}
}

// Single expiries, with or without a handover, were written before expiry
// batches and carry no term; such entries in existing logs still apply, in
// any term.
func TestOldExpiryEntriesApply(t *testing.T) {
	t.Parallel()
	// version 2, OpExpire, key "k", id "a1", owner "B", ttl 1500ms, next "b2"
	entry := []byte{2, byte(lease.OpExpire), 1, 'k', 2, 'a', '1', 1, 'B', 0xdc, 0x0b, 2, 'b', '2'}
	var c lease.Command
	if err := c.UnmarshalBinary(entry); err != nil {
		t.Fatal(err)
	}
	s := lease.New(0)
	s.Apply(1, 1, lease.Command{Op: lease.OpAcquire, Key: "k", ID: "a1", Owner: "A", TTL: time.Second})
	r := s.Apply(2, 7, c)
	if r.Err != nil || r.Event.Type != lease.Expired || r.Event.Lease.ID != "a1" {
		t.Fatalf("old expiry: %+v", r)
	}
	if r.Next.Type != lease.Acquired || r.Next.Lease != (lease.Lease{Key: "k", ID: "b2", Owner: "B", Token: 2, TTL: 1500 * time.Millisecond}) {
		t.Fatalf("old expiry's handover: %+v", r.Next)
	}
}

func TestRestoreRejectsGarbage(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"", "nope", "fenced\x00\x01\xff"} {
		if _, err := lease.Restore(bytes.NewBufferString(in), 0); !errors.Is(err, lease.ErrBadSnapshot) {
			t.Errorf("Restore(%q) = %v, want ErrBadSnapshot", in, err)
		}
	}
}

// BenchmarkApplyAcquireRelease cycles keys through acquire and release,
// in an empty state and beside 100,000 live leases, where a lookup walks a
// deeper index.
func BenchmarkApplyAcquireRelease(b *testing.B) {
	for _, live := range []int{0, 100_000} {
		b.Run(fmt.Sprintf("live=%d", live), func(b *testing.B) {
			s := lease.New(0)
			var index uint64
			for i := range live {
				index++
				s.Apply(index, 0, lease.Command{Op: lease.OpAcquire, Key: fmt.Sprintf("live/%08d", i), ID: "id", Owner: "o", TTL: time.Hour})
			}
			keys := make([]string, 1024)
			for i := range keys {
				keys[i] = fmt.Sprintf("bench/%d", i)
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				k := keys[i%len(keys)]
				index++
				s.Apply(index, 0, lease.Command{Op: lease.OpAcquire, Key: k, ID: "id", Owner: "o", TTL: time.Second})
				index++
				s.Apply(index, 0, lease.Command{Op: lease.OpRelease, Key: k, ID: "id"})
			}
		})
	}
}

// BenchmarkCurrent is the check a release makes, beside 100,000 leases.
func BenchmarkCurrent(b *testing.B) {
	s := lease.New(0)
	keys, ids := make([]string, 100_000), make([]string, 100_000)
	for i := range keys {
		keys[i], ids[i] = fmt.Sprintf("live/%08d", i), fmt.Sprint(i)
		s.Apply(uint64(i+1), 0, lease.Command{Op: lease.OpAcquire, Key: keys[i], ID: ids[i], Owner: "o", TTL: time.Hour})
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		n := i * 7919 % len(keys)
		if _, err := s.Current(keys[n], ids[n]); err != nil {
			b.Fatal(err)
		}
	}
}

// Entries written before handovers existed (version 1) still decode.
func TestCommandVersion1(t *testing.T) {
	t.Parallel()
	v1 := []byte{1, byte(lease.OpRelease), 1, 'k', 2, 'i', 'd', 0, 0}
	var c lease.Command
	if err := c.UnmarshalBinary(v1); err != nil || !reflect.DeepEqual(c, lease.Command{Op: lease.OpRelease, Key: "k", ID: "id"}) {
		t.Fatalf("version 1 entry: %+v, %v", c, err)
	}
}

// A snapshot keeps the state it was taken from, whatever happens next.
func TestSnapshotIsFrozen(t *testing.T) {
	t.Parallel()
	s := lease.New(10)
	s.Apply(1, 0, lease.Command{Op: lease.OpAcquire, Key: "a", ID: "a1", Owner: "A", TTL: time.Second})
	s.Apply(2, 0, lease.Command{Op: lease.OpAcquire, Key: "b", ID: "b1", Owner: "B", TTL: time.Second})
	want := s.List("", 0)
	if len(want) != 2 {
		t.Fatalf("List = %v, want two leases", want)
	}
	snap := s.Snapshot()

	// Release a with a handover, expire b, take c.
	s.Apply(3, 0, lease.Command{Op: lease.OpRelease, Key: "a", ID: "a1", NextID: "a2", Owner: "C", TTL: 2 * time.Second})
	s.Apply(4, 0, lease.Command{Op: lease.OpExpire, Key: "b", ID: "b1"})
	s.Apply(5, 0, lease.Command{Op: lease.OpAcquire, Key: "c", ID: "c1", Owner: "C", TTL: time.Second})

	var buf bytes.Buffer
	if _, err := snap.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	r, err := lease.Restore(&buf, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.List("", 0); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("restored %v, want the state at the snapshot %v", got, want)
	}
}

func BenchmarkSnapshot(b *testing.B) {
	s := lease.New(0)
	for i := range 100_000 {
		s.Apply(uint64(i+1), 0, lease.Command{Op: lease.OpAcquire, Key: fmt.Sprintf("k%d", i), ID: "0123456789abcdef0123456789abcdef", Owner: "owner", TTL: time.Minute})
	}
	b.ReportAllocs()
	for b.Loop() {
		s.Snapshot()
	}
}

// modelList is the model's answer to List(prefix, 0).
func modelList(holder map[string]lease.Lease, prefix string) []lease.Lease {
	var out []lease.Lease
	for k, l := range holder {
		if strings.HasPrefix(k, prefix) {
			out = append(out, l)
		}
	}
	slices.SortFunc(out, func(a, b lease.Lease) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// Event.Held is the state's record of the event's lease: the one granted,
// listed by EachHeld, then the one ended, and its lease never changes
// after, so that the leader's deadlines may keep it instead of a copy.
func TestHeldRecord(t *testing.T) {
	t.Parallel()
	s := lease.New(0)
	res := s.Apply(1, 0, lease.Command{Op: lease.OpAcquire, Key: "k", ID: "a", Owner: "A", TTL: time.Second})
	held := res.Event.Held()
	if held == nil || held.Lease != res.Event.Lease || s.Held("k") != held {
		t.Fatalf("Held() = %v, want the granted lease %+v, the state's record of k", held, res.Event.Lease)
	}
	var listed []*lease.Held
	s.EachHeld(func(h *lease.Held) bool { listed = append(listed, h); return true })
	if len(listed) != 1 || listed[0] != held {
		t.Fatalf("EachHeld listed %v, want only %p", listed, held)
	}
	if got := s.View().ListHeld("", 0); len(got) != 1 || got[0] != held {
		t.Fatalf("ListHeld = %v, want only %p", got, held)
	}
	granted := held.Lease
	rel := s.Apply(2, 0, lease.Command{Op: lease.OpRelease, Key: "k", ID: "a", NextID: "b", Owner: "B", TTL: time.Minute})
	if rel.Event.Held() != held {
		t.Errorf("the Released event has Held() = %v, want the ended record %p", rel.Event.Held(), held)
	}
	next := rel.Next.Held()
	if next == nil || next.Lease != rel.Next.Lease || s.Held("k") != next {
		t.Errorf("handover Held() = %v, want %+v", next, rel.Next.Lease)
	}
	if exp := s.Apply(3, 0, lease.Command{Op: lease.OpExpire, Key: "k", ID: "b"}); exp.Event.Held() != next {
		t.Errorf("the Expired event has Held() = %v, want the ended record %p", exp.Event.Held(), next)
	}
	if s.Held("k") != nil {
		t.Errorf("Held(k) = %v after the expiry, want nil", s.Held("k"))
	}
	s.Apply(4, 0, lease.Command{Op: lease.OpAcquire, Key: "k", ID: "c", Owner: "A", TTL: time.Hour})
	if held.Lease != granted {
		t.Fatalf("the record's lease changed to %+v, want %+v", held.Lease, granted)
	}
}

// Leases of one owner share one copy of the owner's name, however many
// copies the commands carried; quotas still count per owner.
func TestOwnerNameShared(t *testing.T) {
	t.Parallel()
	s := lease.New(0)
	owner := func() string { return strings.Clone("owner-with-a-long-name") }
	for i := range 3 {
		s.Apply(uint64(i+1), 0, lease.Command{Op: lease.OpAcquire, Key: fmt.Sprint("k", i), ID: "id", Owner: owner(), TTL: time.Second})
	}
	ls := s.List("", 0)
	for _, l := range ls[1:] {
		if unsafe.StringData(l.Owner) != unsafe.StringData(ls[0].Owner) {
			t.Fatalf("lease %q keeps its own copy of owner %q", l.Key, l.Owner)
		}
	}
	if n := s.OwnerLen(owner()); n != 3 {
		t.Fatalf("OwnerLen = %d, want 3", n)
	}
	s.Apply(4, 0, lease.Command{Op: lease.OpRelease, Key: "k0", ID: "id"})
	if n := s.OwnerLen(owner()); n != 2 {
		t.Fatalf("OwnerLen after a release = %d, want 2", n)
	}
}
