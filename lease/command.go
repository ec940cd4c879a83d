package lease

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"time"
)

// Op is the kind of a Command.
type Op uint8

const (
	OpAcquire Op = 1 // grant Key to Owner as lease ID with TTL, if free
	OpRelease Op = 2 // end lease ID of Key at its holder's request
	OpExpire  Op = 3 // end lease ID of Key because the leader saw it expire
	// OpExpireBatch ends every lease of Expiries because the leader of Term
	// saw them expire. The leader writes this instead of OpExpire, which
	// existing logs may still hold.
	OpExpireBatch Op = 4
	// OpRevoke ends lease ID of Key at an operator's request; By names the
	// principal that asked. It hands the key over like OpRelease.
	OpRevoke Op = 5
)

func (o Op) String() string {
	switch o {
	case OpAcquire:
		return "acquire"
	case OpRelease:
		return "release"
	case OpExpire:
		return "expire"
	case OpExpireBatch:
		return "expire-batch"
	case OpRevoke:
		return "revoke"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Command is one entry of the replicated log. Everything that depends on
// time or randomness is decided before the command is written.
//
// A release or expiry with NextID set also hands the key over, in the same
// entry, to the next holder: lease NextID with Owner and TTL. The handover
// costs one log write instead of two and leaves no moment in which the key
// is free for someone else to take.
type Command struct {
	Op     Op
	Key    string
	ID     string
	Owner  string        // acquire, or the next holder of a handover
	TTL    time.Duration // acquire, or handover; whole milliseconds
	NextID string        // release, revoke or expiry only: hand over to this lease
	// By is the authenticated principal that revoked the lease (OpRevoke
	// only), kept in the log as the record of who ended it.
	By string

	// Term is the leadership term whose leader decided an OpExpireBatch.
	// Deadlines are only meaningful to the leader that tracked them, so the
	// batch takes effect only if it is written to the log in that same term
	// (State.Apply): a deposed leader's late decision, appended after it
	// wins a later term, changes nothing.
	Term uint64
	// Expiries are the leases an OpExpireBatch ends, applied in order. At
	// most one of them may hand its key over: every grant is made by an
	// entry of its own, so tokens stay distinct across keys.
	Expiries []Expiry
}

// Expiry is one lease ended by an OpExpireBatch: lease ID of Key, and, with
// NextID set, the handover of Key to lease NextID with Owner and TTL.
type Expiry struct {
	Key    string
	ID     string
	NextID string
	Owner  string
	TTL    time.Duration // whole milliseconds
}

// Version 2 added NextID; version 1 entries still decode. Version 3 is the
// layout of OpExpireBatch, which only it uses:
//
//	3, op, term, count, count x (key, id, nextID[, owner, ttl])
//
// with owner and ttl present only when nextID is not empty. Lease IDs of
// lowercase hex (the server's) are stored as the bytes they spell, which
// halves them. Version 4 is the layout of OpRevoke, which only it uses:
// version 2's fields followed by By.
const (
	commandVersion = 2
	batchVersion   = 3
	revokeVersion  = 4
)

// ErrBadCommand is returned when a log entry cannot be decoded.
var ErrBadCommand = errors.New("malformed command")

// AppendBinary appends the encoding of c to b.
func (c Command) AppendBinary(b []byte) ([]byte, error) {
	if c.Op == OpExpireBatch {
		return c.appendBatch(b)
	}
	v := byte(commandVersion)
	if c.Op == OpRevoke {
		v = revokeVersion
	}
	b = append(b, v, byte(c.Op))
	b = appendString(b, c.Key)
	b = appendString(b, c.ID)
	b = appendString(b, c.Owner)
	b = binary.AppendUvarint(b, uint64(c.TTL/time.Millisecond))
	b = appendString(b, c.NextID)
	if v == revokeVersion {
		b = appendString(b, c.By)
	}
	return b, nil
}

func (c Command) appendBatch(b []byte) ([]byte, error) {
	if err := c.checkBatch(); err != nil {
		return b, err
	}
	b = append(b, batchVersion, byte(c.Op))
	b = binary.AppendUvarint(b, c.Term)
	b = binary.AppendUvarint(b, uint64(len(c.Expiries)))
	for _, e := range c.Expiries {
		b = appendString(b, e.Key)
		b = appendID(b, e.ID)
		b = appendID(b, e.NextID)
		if e.NextID != "" {
			b = appendString(b, e.Owner)
			b = binary.AppendUvarint(b, uint64(e.TTL/time.Millisecond))
		}
	}
	return b, nil
}

// checkBatch enforces the rules of OpExpireBatch that State.Apply relies on.
func (c Command) checkBatch() error {
	if len(c.Expiries) == 0 {
		return fmt.Errorf("%w: empty expiry batch", ErrBadCommand)
	}
	handovers := 0
	for _, e := range c.Expiries {
		if e.NextID != "" {
			handovers++
		}
	}
	if handovers > 1 {
		return fmt.Errorf("%w: expiry batch with %d handovers, at most 1", ErrBadCommand, handovers)
	}
	return nil
}

// MarshalBinary encodes c for the log.
func (c Command) MarshalBinary() ([]byte, error) {
	n := 16 + len(c.Key) + len(c.ID) + len(c.Owner) + len(c.NextID) + len(c.By)
	for _, e := range c.Expiries {
		n += 4 + len(e.Key) + len(e.ID)/2
	}
	return c.AppendBinary(make([]byte, 0, n))
}

// UnmarshalBinary decodes a log entry written by MarshalBinary.
func (c *Command) UnmarshalBinary(b []byte) error {
	d := decoder{b: b}
	v := d.byte()
	*c = Command{Op: Op(d.byte())}
	switch v {
	case 1, commandVersion, revokeVersion:
		c.Key = d.string()
		c.ID = d.string()
		c.Owner = d.string()
		c.TTL = d.millis()
		if v >= 2 {
			c.NextID = d.string()
		}
		if v == revokeVersion {
			c.By = d.string()
		}
		if (v == revokeVersion) != (c.Op == OpRevoke) {
			return fmt.Errorf("%w: op %v in version %d", ErrBadCommand, c.Op, v)
		}
	case batchVersion:
		if c.Op != OpExpireBatch {
			return fmt.Errorf("%w: op %v in an expiry batch", ErrBadCommand, c.Op)
		}
		c.Term = d.uvarint()
		n := d.uvarint()
		if n > uint64(len(d.b)) { // every expiry takes at least 3 bytes
			return fmt.Errorf("%w: %d expiries in %d bytes", ErrBadCommand, n, len(d.b))
		}
		c.Expiries = make([]Expiry, n)
		for i := range c.Expiries {
			e := &c.Expiries[i]
			e.Key = d.string()
			e.ID = d.id()
			e.NextID = d.id()
			if e.NextID != "" {
				e.Owner = d.string()
				e.TTL = d.millis()
			}
		}
	default:
		return fmt.Errorf("%w: version %d", ErrBadCommand, v)
	}
	if d.err != nil {
		return d.err
	}
	if len(d.b) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrBadCommand, len(d.b))
	}
	switch c.Op {
	case OpAcquire:
		if c.NextID != "" {
			return fmt.Errorf("%w: acquire with a handover", ErrBadCommand)
		}
		return nil
	case OpRelease, OpExpire:
		return nil
	case OpRevoke:
		if c.By == "" {
			return fmt.Errorf("%w: revoke without a principal", ErrBadCommand)
		}
		return nil
	case OpExpireBatch:
		if v != batchVersion {
			return fmt.Errorf("%w: expiry batch in version %d", ErrBadCommand, v)
		}
		return c.checkBatch()
	}
	return fmt.Errorf("%w: unknown op %d", ErrBadCommand, c.Op)
}

// appendID writes a lease ID: its length doubled, plus one if the ID is
// lowercase hex stored as the bytes it spells, then those bytes.
func appendID(b []byte, id string) []byte {
	if len(id)%2 == 0 && isLowerHex(id) {
		b = binary.AppendUvarint(b, uint64(len(id))<<1|1)
		b, _ = hex.AppendDecode(b, []byte(id)) // valid: checked above
		return b
	}
	b = binary.AppendUvarint(b, uint64(len(id))<<1)
	return append(b, id...)
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decoder reads the varint framing shared by commands and snapshots. The
// first error sticks; later reads return zero values.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: truncated %s", ErrBadCommand, what)
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) < 1 {
		d.fail("byte")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// id reads a lease ID written by appendID.
func (d *decoder) id() string {
	v := d.uvarint()
	n := v >> 1
	if v&1 == 0 {
		return d.take(n)
	}
	if n%2 != 0 || n/2 > uint64(len(d.b)) {
		d.fail("lease id")
		return ""
	}
	s := hex.EncodeToString(d.b[:n/2])
	d.b = d.b[n/2:]
	return s
}

// millis reads a duration in whole milliseconds. One too long for a
// time.Duration would wrap around to another, so it is refused.
func (d *decoder) millis() time.Duration {
	v := d.uvarint()
	if v > uint64(math.MaxInt64/int64(time.Millisecond)) {
		if d.err == nil {
			d.err = fmt.Errorf("%w: duration of %d ms out of range", ErrBadCommand, v)
		}
		d.b = nil
		return 0
	}
	return time.Duration(v) * time.Millisecond
}

func (d *decoder) string() string { return d.take(d.uvarint()) }

func (d *decoder) take(n uint64) string {
	if n > uint64(len(d.b)) {
		d.fail("string")
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}
