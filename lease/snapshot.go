package lease

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/fencedio/fenced/internal/failpoint"
)

// Snapshot is a frozen copy of a State, safe to write out while the state
// moves on.
type Snapshot struct {
	applied uint64
	leases  View      // frozen: writing it out needs no lock
	idle    []idleKey // oldest first
}

// Snapshot copies the state. The copy shares no mutable memory with s: the
// leases are a View of the persistent index, taken in O(1), and only the
// remembered idle keys (at most MaxIdleKeys) are copied. Leases are written
// in key order, so equal states write equal bytes.
func (s *State) Snapshot() *Snapshot {
	snap := &Snapshot{applied: s.applied, leases: s.View()}
	snap.idle = make([]idleKey, 0, len(s.idle))
	for _, e := range s.queue[s.head:] {
		if t, ok := s.idle[e.key]; ok && t == e.token {
			snap.idle = append(snap.idle, e)
		}
	}
	return snap
}

var snapshotMagic = [8]byte{'f', 'e', 'n', 'c', 'e', 'd', 0, 1}

// WriteTo writes the snapshot in a compact binary format.
func (snap *Snapshot) WriteTo(w io.Writer) (int64, error) {
	bw := bufio.NewWriterSize(w, 1<<16)
	var n int64
	var buf []byte
	flush := func() error {
		m, err := bw.Write(buf)
		n += int64(m)
		buf = buf[:0]
		return err
	}
	buf = append(buf, snapshotMagic[:]...)
	buf = binary.AppendUvarint(buf, snap.applied)
	buf = binary.AppendUvarint(buf, uint64(snap.leases.Len()))
	var err error
	snap.leases.Scan("", func(l Lease) bool {
		buf = appendString(buf, l.Key)
		buf = appendString(buf, l.ID)
		buf = appendString(buf, l.Owner)
		buf = binary.AppendUvarint(buf, l.Token)
		buf = binary.AppendUvarint(buf, uint64(l.TTL/time.Millisecond))
		if len(buf) > 1<<15 {
			err = flush()
		}
		return err == nil
	})
	if err != nil {
		return n, err
	}
	buf = binary.AppendUvarint(buf, uint64(len(snap.idle)))
	for _, e := range snap.idle {
		buf = appendString(buf, e.key)
		buf = binary.AppendUvarint(buf, e.token)
		if len(buf) > 1<<15 {
			if err := flush(); err != nil {
				return n, err
			}
		}
	}
	if err := flush(); err != nil {
		return n, err
	}
	return n, bw.Flush()
}

// ErrBadSnapshot is returned when a snapshot cannot be read.
var ErrBadSnapshot = errors.New("malformed lease snapshot")

// Restore reads a snapshot written by Snapshot.WriteTo into a new State that
// remembers at most maxIdle freed keys (see New).
func Restore(r io.Reader, maxIdle int) (*State, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read lease snapshot: %w", err)
	}
	if len(data) < len(snapshotMagic) || [8]byte(data[:8]) != snapshotMagic {
		return nil, fmt.Errorf("%w: bad header", ErrBadSnapshot)
	}
	d := decoder{b: data[8:]}
	s := New(maxIdle)
	s.applied = d.uvarint()
	n := d.uvarint()
	// Nothing shares the new state's index yet: it is built in place, and
	// leases come in key order, which fills its leaves.
	for i := uint64(0); i < n && d.err == nil; i++ {
		h := &Held{Lease: Lease{Key: d.string(), ID: d.string(), Owner: d.string(), Token: d.uvarint()}}
		h.TTL = d.millis()
		s.own(&h.Lease)
		if s.index.set(h, s.gen) != nil {
			return nil, fmt.Errorf("%w: key %q appears twice", ErrBadSnapshot, h.Key)
		}
	}
	if failpoint.Enabled(failpoint.RestoreDropsLeases) {
		applied := s.applied
		s = New(maxIdle)
		s.applied = applied
	}
	n = d.uvarint()
	for i := uint64(0); i < n && d.err == nil; i++ {
		key := d.string()
		s.remember(key, d.uvarint())
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSnapshot, d.err)
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrBadSnapshot, len(d.b))
	}
	return s, nil
}
