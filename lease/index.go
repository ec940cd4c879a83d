package lease

import "sync/atomic"

// The index of current leases: a persistent B+ tree of the state's records
// (Held), ordered by key.
//
// A tree is persistent: a change copies the nodes on its path, and an index
// value taken before the change (a View) keeps the nodes it had, unchanged.
// Copying every node on every path would make garbage of a few KiB per
// command, so each node carries the generation it was made in, and a
// change made in generation g changes the nodes of g in place and copies
// only the others. The state starts a new generation whenever it hands out
// its index (State.View), so no node that a view can reach is ever changed.
//
// Wide nodes keep a lease's share of the tree small: a leaf holds up to
// leafWidth pointers to records and no keys of its own (a record holds its
// key), and keys inserted in order, as a workload of sequential names does,
// fill their leaves. Removals merge or even out nodes below half full.

const (
	// leafWidth is the records of a leaf: 62 pointers and the leaf's
	// header make 512 bytes, one of the allocator's size classes.
	leafWidth   = 62
	branchWidth = 32 // children of a branch
)

// generations hands out the generation of every change to an index; 0 is
// never handed out.
var generations atomic.Uint64

func newGeneration() uint64 { return generations.Add(1) }

// index is one version of the tree.
type index struct {
	root node // *leaf, *branch, or nil when empty
	len  int
}

// node is a *leaf or a *branch.
type node interface{ width() int }

type leaf struct {
	gen   uint64
	n     int
	items [leafWidth]*Held // items[:n] ordered by key; the rest nil
}

type branch struct {
	gen uint64
	n   int
	// keys[i] is the least key under kids[i] for i >= 1: child i holds the
	// keys from keys[i] up to keys[i+1], excluded. keys[0] is unused.
	keys [branchWidth]string
	kids [branchWidth]node
}

func (l *leaf) width() int   { return l.n }
func (b *branch) width() int { return b.n }

// search returns the position of the first record of l at or after key,
// and whether that record is key's.
func (l *leaf) search(key string) (int, bool) {
	lo, hi := 0, l.n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if l.items[m].Key < key {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < l.n && l.items[lo].Key == key
}

// child returns the position of the child of b whose keys include key's
// place.
func (b *branch) child(key string) int {
	lo, hi := 1, b.n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if b.keys[m] <= key {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo - 1
}

// own returns l itself if it was made in generation gen, else a copy made
// in gen.
func (l *leaf) own(gen uint64) *leaf {
	if l.gen == gen {
		return l
	}
	c := *l
	c.gen = gen
	return &c
}

func (b *branch) own(gen uint64) *branch {
	if b.gen == gen {
		return b
	}
	c := *b
	c.gen = gen
	return &c
}

// get returns the record of key, nil if there is none.
func (t index) get(key string) *Held {
	n := t.root
	for {
		switch x := n.(type) {
		case *branch:
			n = x.kids[x.child(key)]
		case *leaf:
			if i, ok := x.search(key); ok {
				return x.items[i]
			}
			return nil
		default:
			return nil
		}
	}
}

// set makes h the record of its key, changing the tree in generation gen,
// and returns the record it replaced, nil if none.
func (t *index) set(h *Held, gen uint64) *Held {
	if t.root == nil {
		l := &leaf{gen: gen, n: 1}
		l.items[0] = h
		t.root, t.len = l, 1
		return nil
	}
	root, right, sep, old := insert(t.root, h, gen)
	if right != nil {
		b := &branch{gen: gen, n: 2}
		b.kids[0], b.kids[1], b.keys[1] = root, right, sep
		root = b
	}
	t.root = root
	if old == nil {
		t.len++
	}
	return old
}

// insert puts h in the subtree n. It returns the subtree's new root, and,
// if that had to split, the new right sibling and its least key.
func insert(n node, h *Held, gen uint64) (node, node, string, *Held) {
	if l, ok := n.(*leaf); ok {
		return l.insert(h, gen)
	}
	return n.(*branch).insert(h, gen)
}

func (l *leaf) insert(h *Held, gen uint64) (node, node, string, *Held) {
	i, found := l.search(h.Key)
	l = l.own(gen)
	if found {
		old := l.items[i]
		l.items[i] = h
		return l, nil, "", old
	}
	if l.n < leafWidth {
		l.insertAt(i, h)
		return l, nil, "", nil
	}
	// Full: split in halves, or, for a record at either end, leave the
	// full side as it is, so that keys inserted in order fill leaves.
	mid := leafWidth / 2
	switch i {
	case 0:
		mid = 0
	case leafWidth:
		mid = leafWidth
	}
	r := &leaf{gen: gen, n: l.n - mid}
	copy(r.items[:], l.items[mid:l.n])
	clear(l.items[mid:l.n])
	l.n = mid
	if i < mid || i == mid && mid < leafWidth {
		l.insertAt(i, h)
	} else {
		r.insertAt(i-mid, h)
	}
	return l, r, r.items[0].Key, nil
}

// insertAt puts h at position i of l, which has room.
func (l *leaf) insertAt(i int, h *Held) {
	copy(l.items[i+1:l.n+1], l.items[i:l.n])
	l.items[i] = h
	l.n++
}

func (b *branch) insert(h *Held, gen uint64) (node, node, string, *Held) {
	i := b.child(h.Key)
	kid, right, sep, old := insert(b.kids[i], h, gen)
	b = b.own(gen)
	b.kids[i] = kid
	if right == nil {
		return b, nil, "", old
	}
	at := i + 1 // the new child's position
	if b.n < branchWidth {
		b.insertAt(at, sep, right)
		return b, nil, "", old
	}
	// Full: split in halves, or leave b full when the new child is its
	// last, as keys inserted in order make it.
	mid := branchWidth / 2
	if at == branchWidth {
		mid = branchWidth
	}
	r := &branch{gen: gen, n: b.n - mid}
	copy(r.keys[:], b.keys[mid:b.n])
	copy(r.kids[:], b.kids[mid:b.n])
	clear(b.keys[mid:b.n])
	clear(b.kids[mid:b.n])
	b.n = mid
	if at < mid || at == mid && mid < branchWidth {
		b.insertAt(at, sep, right)
	} else {
		r.insertAt(at-mid, sep, right)
	}
	// r.keys[0] is r's least key: its separator in the parent.
	up := r.keys[0]
	r.keys[0] = ""
	return b, r, up, old
}

// insertAt puts child kid, whose least key is key, at position i of b,
// which has room.
func (b *branch) insertAt(i int, key string, kid node) {
	copy(b.keys[i+1:b.n+1], b.keys[i:b.n])
	copy(b.kids[i+1:b.n+1], b.kids[i:b.n])
	b.keys[i], b.kids[i] = key, kid
	b.n++
}

// removeAt takes child i out of b.
func (b *branch) removeAt(i int) {
	copy(b.keys[i:], b.keys[i+1:b.n])
	copy(b.kids[i:], b.kids[i+1:b.n])
	b.n--
	b.keys[b.n], b.kids[b.n] = "", nil
	if i == 0 {
		b.keys[0] = ""
	}
}

// remove takes the record of key out, changing the tree in generation gen,
// and returns it, nil if there was none.
func (t *index) remove(key string, gen uint64) *Held {
	if t.root == nil {
		return nil
	}
	root, old := remove(t.root, key, gen)
	if old == nil {
		return nil
	}
	t.len--
	for {
		if b, ok := root.(*branch); ok && b.n == 1 {
			root = b.kids[0]
			continue
		}
		if root.width() == 0 {
			root = nil
		}
		break
	}
	t.root = root
	return old
}

// remove takes key's record out of the subtree n; the subtree's new root
// may be empty or below half full, for the caller to mend.
func remove(n node, key string, gen uint64) (node, *Held) {
	if l, ok := n.(*leaf); ok {
		return l.remove(key, gen)
	}
	return n.(*branch).remove(key, gen)
}

func (l *leaf) remove(key string, gen uint64) (node, *Held) {
	i, found := l.search(key)
	if !found {
		return l, nil
	}
	old := l.items[i]
	l = l.own(gen)
	copy(l.items[i:], l.items[i+1:l.n])
	l.n--
	l.items[l.n] = nil
	return l, old
}

func (b *branch) remove(key string, gen uint64) (node, *Held) {
	i := b.child(key)
	kid, old := remove(b.kids[i], key, gen)
	if old == nil {
		return b, nil
	}
	b = b.own(gen)
	b.kids[i] = kid
	switch {
	case kid.width() == 0:
		b.removeAt(i)
	case b.n > 1 && kid.width() < minWidth(kid):
		b.mend(i, gen)
	}
	return b, old
}

// minWidth is the fewest children or records a node keeps after a removal
// while it has a sibling to merge with or borrow from.
func minWidth(n node) int {
	if _, ok := n.(*leaf); ok {
		return leafWidth / 2
	}
	return branchWidth / 2
}

// mend merges child i of b, fallen below half full, with a sibling if
// both fit in one node, and else evens the two out.
func (b *branch) mend(i int, gen uint64) {
	if i == b.n-1 {
		i-- // the left sibling; else the right one
	}
	switch l := b.kids[i].(type) {
	case *leaf:
		r := b.kids[i+1].(*leaf)
		l = l.own(gen)
		b.kids[i] = l
		if l.n+r.n <= leafWidth {
			copy(l.items[l.n:], r.items[:r.n])
			l.n += r.n
			b.removeAt(i + 1)
			return
		}
		r = r.own(gen)
		b.kids[i+1] = r
		if want := (l.n + r.n) / 2; l.n > want {
			k := l.n - want // l's last k move to the front of r
			copy(r.items[k:], r.items[:r.n])
			copy(r.items[:k], l.items[want:l.n])
			clear(l.items[want:l.n])
			l.n, r.n = want, r.n+k
		} else {
			k := want - l.n // r's first k move to the end of l
			copy(l.items[l.n:], r.items[:k])
			copy(r.items[:], r.items[k:r.n])
			clear(r.items[r.n-k : r.n])
			l.n, r.n = want, r.n-k
		}
		b.keys[i+1] = r.items[0].Key
	case *branch:
		r := b.kids[i+1].(*branch)
		sep := b.keys[i+1] // r's least key
		l = l.own(gen)
		b.kids[i] = l
		if l.n+r.n <= branchWidth {
			l.keys[l.n] = sep
			copy(l.keys[l.n+1:], r.keys[1:r.n])
			copy(l.kids[l.n:], r.kids[:r.n])
			l.n += r.n
			b.removeAt(i + 1)
			return
		}
		r = r.own(gen)
		b.kids[i+1] = r
		r.keys[0] = sep // for the moves; cleared below
		if want := (l.n + r.n) / 2; l.n > want {
			k := l.n - want // l's last k children move to the front of r
			copy(r.keys[k:], r.keys[:r.n])
			copy(r.kids[k:], r.kids[:r.n])
			copy(r.keys[:k], l.keys[want:l.n])
			copy(r.kids[:k], l.kids[want:l.n])
			clear(l.keys[want:l.n])
			clear(l.kids[want:l.n])
			l.n, r.n = want, r.n+k
		} else {
			k := want - l.n // r's first k children move to the end of l
			copy(l.keys[l.n:], r.keys[:k])
			copy(l.kids[l.n:], r.kids[:k])
			copy(r.keys[:], r.keys[k:r.n])
			copy(r.kids[:], r.kids[k:r.n])
			clear(r.keys[r.n-k : r.n])
			clear(r.kids[r.n-k : r.n])
			l.n, r.n = want, r.n-k
		}
		b.keys[i+1] = r.keys[0]
		r.keys[0] = ""
	}
}

// ascend calls fn for each record from key from on, in key order, until fn
// returns false.
func (t index) ascend(from string, fn func(*Held) bool) {
	if t.root != nil {
		ascend(t.root, from, fn)
	}
}

func ascend(n node, from string, fn func(*Held) bool) bool {
	switch x := n.(type) {
	case *leaf:
		i, _ := x.search(from)
		for ; i < x.n; i++ {
			if !fn(x.items[i]) {
				return false
			}
		}
	case *branch:
		for i := x.child(from); i < x.n; i++ {
			if !ascend(x.kids[i], from, fn) {
				return false
			}
			from = "" // every key under the next children is past it
		}
	}
	return true
}
