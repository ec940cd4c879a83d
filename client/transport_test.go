package client

import (
	"encoding/binary"
	"io"
	"testing"
)

// chunks is a body that returns one chunk per Read, as connect's request
// pipe does for each of its writes.
type chunks struct{ parts [][]byte }

func (c *chunks) Read(p []byte) (int, error) {
	if len(c.parts) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.parts[0])
	if c.parts[0] = c.parts[0][n:]; len(c.parts[0]) == 0 {
		c.parts = c.parts[1:]
	}
	return n, nil
}

func (*chunks) Close() error { return nil }

func envelope(payload string) (prefix, data []byte) {
	prefix = make([]byte, 5)
	binary.BigEndian.PutUint32(prefix[1:], uint32(len(payload)))
	return prefix, []byte(payload)
}

func TestMessageReaderReturnsWholeMessages(t *testing.T) {
	t.Parallel()
	var parts [][]byte
	var want []string
	for _, msg := range []string{"renew a", "", "renew bb", "renew ccc"} {
		p, d := envelope(msg)
		parts = append(parts, p, d)
		want = append(want, string(p)+msg)
	}
	// A prefix that arrives in pieces.
	p, d := envelope("split")
	parts = append(parts, p[:2], p[2:], d)
	want = append(want, string(p)+"split")

	r := &messageReader{body: &chunks{parts: parts}}
	buf := make([]byte, 64)
	for i, w := range want {
		n, err := r.Read(buf)
		if n == 0 && err == nil { // the empty payload's own write
			n, err = r.Read(buf)
		}
		if err != nil || string(buf[:n]) != w {
			t.Fatalf("read %d = %q, %v; want %q", i, buf[:n], err, w)
		}
	}
	if n, err := r.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("read after the last message = %d, %v; want 0, EOF", n, err)
	}
}

func TestMessageReaderSmallBuffer(t *testing.T) {
	t.Parallel()
	p, d := envelope("a longer payload than the buffer")
	r := &messageReader{body: &chunks{parts: [][]byte{p, d}}}
	got, err := io.ReadAll(struct{ io.Reader }{readerFunc(func(b []byte) (int, error) {
		return r.Read(b[:min(len(b), 8)])
	})})
	if err != nil || string(got) != string(p)+string(d) {
		t.Fatalf("got %q, %v", got, err)
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }
