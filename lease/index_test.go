package lease

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// checkIndex fails t unless t's tree is well formed: leaves all at one
// depth, keys in strict order within the bounds their branches give, no
// empty node, unused slots cleared (so that nothing removed stays
// reachable), and len the count of records. It returns the records in
// order.
func checkIndex(t testing.TB, x index) []*Held {
	t.Helper()
	var out []*Held
	leafDepth := -1
	var walk func(n node, depth int, lo, hi string, hasHi bool)
	walk = func(n node, depth int, lo, hi string, hasHi bool) {
		switch n := n.(type) {
		case *leaf:
			if leafDepth < 0 {
				leafDepth = depth
			} else if depth != leafDepth {
				t.Fatalf("leaves at depths %d and %d", leafDepth, depth)
			}
			if n.n < 1 || n.n > leafWidth {
				t.Fatalf("leaf of %d records", n.n)
			}
			for i, h := range n.items {
				if i >= n.n {
					if h != nil {
						t.Fatalf("leaf keeps record %q in unused slot %d", h.Key, i)
					}
					continue
				}
				if h.Key < lo || hasHi && h.Key >= hi {
					t.Fatalf("key %q outside its branch's bounds [%q, %q)", h.Key, lo, hi)
				}
				if len(out) > 0 && out[len(out)-1].Key >= h.Key {
					t.Fatalf("key %q after %q", h.Key, out[len(out)-1].Key)
				}
				out = append(out, h)
			}
		case *branch:
			if n.n < 1 || n.n > branchWidth {
				t.Fatalf("branch of %d children", n.n)
			}
			if n.keys[0] != "" {
				t.Fatalf("branch keeps %q in its unused first key", n.keys[0])
			}
			for i := n.n; i < branchWidth; i++ {
				if n.keys[i] != "" || n.kids[i] != nil {
					t.Fatalf("branch keeps child %d of %d", i, n.n)
				}
			}
			for i := range n.n {
				clo, chi, chasHi := lo, hi, hasHi
				if i > 0 {
					clo = n.keys[i]
					if clo < lo || hasHi && clo >= hi || i > 1 && clo <= n.keys[i-1] {
						t.Fatalf("separator %q out of order in [%q, %q)", clo, lo, hi)
					}
				}
				if i+1 < n.n {
					chi, chasHi = n.keys[i+1], true
				}
				walk(n.kids[i], depth+1, clo, chi, chasHi)
			}
		default:
			t.Fatalf("node of type %T", n)
		}
	}
	if x.root != nil {
		if b, ok := x.root.(*branch); ok && b.n < 2 {
			t.Fatalf("root branch of %d children", b.n)
		}
		walk(x.root, 0, "", "", false)
	}
	if len(out) != x.len {
		t.Fatalf("len %d, %d records in the tree", x.len, len(out))
	}
	return out
}

// version is an index value taken as the state takes a view, and what it
// held then.
type version struct {
	x    index
	want []*Held
}

// Random changes against a map, with versions taken along the way that
// must keep what they held however the tree changes after.
func TestIndexAgainstMap(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		keys  int // key space
		ops   int
		check int // check the whole tree every check ops
	}{
		{"small", 40, 5_000, 1},
		{"two levels", 1_500, 30_000, 97},
		{"three levels", 40_000, 200_000, 5_003},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(uint64(tc.keys), 7))
			keyOf := func(i int) string { return fmt.Sprintf("k/%06d", i) }
			var (
				x        index
				gen      = newGeneration()
				model    = map[string]*Held{}
				versions []version
			)
			for op := range tc.ops {
				key := keyOf(rng.IntN(tc.keys))
				switch r := rng.IntN(100); {
				case r < 55 || len(model) < tc.keys/20: // set, mostly new keys
					h := &Held{Lease: Lease{Key: key, Token: uint64(op)}}
					if old := x.set(h, gen); old != model[key] {
						t.Fatalf("set %q replaced %v, want %v", key, old, model[key])
					}
					model[key] = h
				case r < 95:
					if old := x.remove(key, gen); old != model[key] {
						t.Fatalf("remove %q took %v, want %v", key, old, model[key])
					}
					delete(model, key)
				case r < 98:
					if got := x.get(key); got != model[key] {
						t.Fatalf("get %q = %v, want %v", key, got, model[key])
					}
				default:
					// Take a version, as State.View does: a new generation
					// for the changes after it. Some are kept to check.
					if len(versions) < 40 && rng.IntN(tc.ops/2_000+1) == 0 {
						versions = append(versions, version{x, sortedModel(model)})
					}
					gen = newGeneration()
				}
				if x.len != len(model) {
					t.Fatalf("len %d, want %d", x.len, len(model))
				}
				if op%tc.check == 0 {
					if got := checkIndex(t, x); !slices.Equal(got, sortedModel(model)) {
						t.Fatalf("after op %d the tree holds other records than the map", op)
					}
				}
			}
			if got := checkIndex(t, x); !slices.Equal(got, sortedModel(model)) {
				t.Fatal("the tree holds other records than the map")
			}
			for i, v := range versions {
				if got := checkIndex(t, v.x); !slices.Equal(got, v.want) {
					t.Fatalf("version %d changed after it was taken", i)
				}
			}
			// Scans from any key, present or not, list the keys from it on.
			all := sortedModel(model)
			for range 200 {
				from := keyOf(rng.IntN(tc.keys + 1))
				start, _ := slices.BinarySearchFunc(all, from, func(h *Held, k string) int { return strings.Compare(h.Key, k) })
				limit := rng.IntN(100)
				var got []*Held
				x.ascend(from, func(h *Held) bool {
					got = append(got, h)
					return len(got) < limit
				})
				want := all[start:min(start+max(limit, 1), len(all))]
				if !slices.Equal(got, want) {
					t.Fatalf("ascend from %q (limit %d): %d records, want %d", from, limit, len(got), len(want))
				}
			}
			// Emptied, the tree has no root left.
			for _, h := range all {
				x.remove(h.Key, gen)
			}
			if x.root != nil || x.len != 0 {
				t.Fatalf("emptied tree: root %T, len %d", x.root, x.len)
			}
		})
	}
}

func sortedModel(m map[string]*Held) []*Held {
	out := make([]*Held, 0, len(m))
	for _, h := range m {
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b *Held) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// A change in another generation than a node's never touches the node: a
// version taken before changes stays as it was, and the unchanged parts
// are shared, not copied.
func TestIndexChangesCopyOnlyTheirPath(t *testing.T) {
	t.Parallel()
	var x index
	gen := newGeneration()
	for i := range 10_000 {
		x.set(&Held{Lease: Lease{Key: fmt.Sprintf("%05d", i)}}, gen)
	}
	before := x
	want := checkIndex(t, before)
	gen = newGeneration()
	x.set(&Held{Lease: Lease{Key: "00500x"}}, gen)
	x.remove("07000", gen)
	x.set(&Held{Lease: Lease{Key: "00001", Token: 1}}, gen)
	if got := checkIndex(t, before); !slices.Equal(got, want) {
		t.Fatal("the version before the changes changed")
	}
	if x.len != 10_000 || x.get("00500x") == nil || x.get("07000") != nil || x.get("00001").Token != 1 || before.get("00001").Token != 0 {
		t.Fatal("the changes are not in the new version")
	}
	nodes := func(x index) map[node]bool {
		set := map[node]bool{}
		var walk func(n node)
		walk = func(n node) {
			set[n] = true
			if b, ok := n.(*branch); ok {
				for i := range b.n {
					walk(b.kids[i])
				}
			}
		}
		walk(x.root)
		return set
	}
	old, made := nodes(before), 0
	for n := range nodes(x) {
		if !old[n] {
			made++
		}
	}
	// A new root, a branch and a leaf per change, and a leaf split.
	if made > 1+3*2+1 {
		t.Fatalf("three changes made %d nodes of the %d of the tree", made, len(old))
	}
}

// Keys inserted in order, ascending or descending, fill their leaves;
// removing most records merges the leaves left.
func TestIndexFill(t *testing.T) {
	t.Parallel()
	const n = 100_000
	leaves := func(x index) int {
		count := 0
		var walk func(n node)
		walk = func(n node) {
			if b, ok := n.(*branch); ok {
				for i := range b.n {
					walk(b.kids[i])
				}
				return
			}
			count++
		}
		if x.root != nil {
			walk(x.root)
		}
		return count
	}
	full := (n + leafWidth - 1) / leafWidth
	for _, order := range []string{"ascending", "descending"} {
		var x index
		gen := newGeneration()
		for i := range n {
			if order == "descending" {
				i = n - 1 - i
			}
			x.set(&Held{Lease: Lease{Key: fmt.Sprintf("fencedbench/memory/%08d", i)}}, gen)
		}
		checkIndex(t, x)
		if got := leaves(x); got > full+1 {
			t.Errorf("%s: %d leaves for %d records, want about %d", order, got, n, full)
		}
		// Remove 15 of every 16 records, spread over the whole tree.
		for i := range n {
			if i%16 != 0 {
				x.remove(fmt.Sprintf("fencedbench/memory/%08d", i), gen)
			}
		}
		checkIndex(t, x)
		if got, most := leaves(x), 2*(n/16)/(leafWidth/2)+2; got > most {
			t.Errorf("%s: %d leaves left for %d records, want at most %d", order, got, n/16, most)
		}
	}
}

func BenchmarkIndexSet(b *testing.B) {
	var x index
	gen := newGeneration()
	keys := make([]*Held, 100_000)
	for i := range keys {
		keys[i] = &Held{Lease: Lease{Key: fmt.Sprintf("k/%08d", rand.IntN(1<<30))}}
		x.set(keys[i], gen)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		h := keys[i%len(keys)]
		x.remove(h.Key, gen)
		x.set(h, gen)
	}
}
