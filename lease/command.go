package lease

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Op is the kind of a Command.
type Op uint8

const (
	OpAcquire Op = 1 // grant Key to Owner as lease ID with TTL, if free
	OpRelease Op = 2 // end lease ID of Key at its holder's request
	OpExpire  Op = 3 // end lease ID of Key because the leader saw it expire
)

func (o Op) String() string {
	switch o {
	case OpAcquire:
		return "acquire"
	case OpRelease:
		return "release"
	case OpExpire:
		return "expire"
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
	NextID string        // release or expiry only: hand over to this lease
}

// commandVersion 2 added NextID; version 1 entries still decode.
const commandVersion = 2

// ErrBadCommand is returned when a log entry cannot be decoded.
var ErrBadCommand = errors.New("malformed command")

// AppendBinary appends the encoding of c to b.
func (c Command) AppendBinary(b []byte) ([]byte, error) {
	b = append(b, commandVersion, byte(c.Op))
	b = appendString(b, c.Key)
	b = appendString(b, c.ID)
	b = appendString(b, c.Owner)
	b = binary.AppendUvarint(b, uint64(c.TTL/time.Millisecond))
	b = appendString(b, c.NextID)
	return b, nil
}

// MarshalBinary encodes c for the log.
func (c Command) MarshalBinary() ([]byte, error) {
	return c.AppendBinary(make([]byte, 0, 16+len(c.Key)+len(c.ID)+len(c.Owner)+len(c.NextID)))
}

// UnmarshalBinary decodes a log entry written by MarshalBinary.
func (c *Command) UnmarshalBinary(b []byte) error {
	d := decoder{b: b}
	v := d.byte()
	if v != 1 && v != commandVersion {
		return fmt.Errorf("%w: version %d", ErrBadCommand, v)
	}
	c.Op = Op(d.byte())
	c.Key = d.string()
	c.ID = d.string()
	c.Owner = d.string()
	c.TTL = time.Duration(d.uvarint()) * time.Millisecond
	c.NextID = ""
	if v >= 2 {
		c.NextID = d.string()
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
	}
	return fmt.Errorf("%w: unknown op %d", ErrBadCommand, c.Op)
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

func (d *decoder) string() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail("string")
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}
