package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencedio/fenced/internal/testenv"
	"github.com/fencedio/fenced/server"
)

// TestAbuseSlowStreams opens, beside a well-behaved client that acquires
// and releases in a loop, 200 Watch streams (half over HTTP/1.1, half over
// HTTP/2 without TLS) from 127.0.0.2 and 100 dashboard event streams
// (/v1/events, the same mix) from 127.0.0.3 whose clients never read a
// byte of their connections, against a fenced with its default limits. The
// HTTP/2 clients grant the server the largest flow-control windows there
// are, so that only the server's own bounds hold it back. For
// slowStreamsFor, while none reads, it follows the server's count of
// streams cut for their unacknowledged bytes
// (fenced_limit_refusals_total{limit="stream-unacked-bytes"}; a dashboard
// may be cut first for falling more than WatchBuffer events behind, which
// it does not count). Then it reads each stream for at most 3 s: a stream
// the server cut ends, with RESYNC (Watch) or "resync" (dashboard) as its
// last message; one it did not cut goes on. It logs the cuts, the server's
// resident memory and its sockets' send queues to the slow clients, and
// the well-behaved client's Acquires a second quiet and beside the
// streams. It fails when a stream did not end with RESYNC last, when a
// send queue held more than twice --stream-unacked-bytes (the send buffer
// the kernel allows), or when the well-behaved client got an error. Its
// rate is logged, not asserted.
func TestAbuseSlowStreams(t *testing.T) {
	testenv.SkipUnlessLong(t)
	bin := buildFenced(t)
	dir := t.TempDir()
	p := startFenced(t, bin, filepath.Join(dir, "data"), filepath.Join(dir, "fenced.log"), "--log-level", "error")

	quiet, quietRate := wellBehavedFor(t, p.url, 10*time.Second)
	base := residentMiB(p)

	const h1Watchers, h2Watchers, h1Dashboards, h2Dashboards, perH2Conn = 100, 100, 50, 50, 25
	var streams []slowStream
	for range h1Watchers {
		streams = append(streams, slowH1(t, "127.0.0.2", p.url, watchRequestH1()))
	}
	for range h1Dashboards {
		streams = append(streams, slowH1(t, "127.0.0.3", p.url, "GET /v1/events HTTP/1.1\r\nHost: x\r\n\r\n"))
	}
	streams = append(streams, slowH2(t, "127.0.0.2", p.url, h2Watchers, perH2Conn, true)...)
	streams = append(streams, slowH2(t, "127.0.0.3", p.url, h2Dashboards, perH2Conn, false)...)

	// Meanwhile, the streams the server says it cut for their unread
	// bytes, before anyone reads, and when it counted the last.
	opened := time.Now()
	var lastCutAfter time.Duration
	stop := make(chan struct{})
	polled := make(chan int)
	go func() {
		n := 0
		for tick := time.NewTicker(250 * time.Millisecond); ; {
			select {
			case <-stop:
				tick.Stop()
				polled <- n
				return
			case <-tick.C:
			}
			if c := cutCount(p.url); c > n {
				n, lastCutAfter = c, time.Since(opened)
			}
		}
	}()
	abused, abusedRate := wellBehavedFor(t, p.url, slowStreamsFor)
	close(stop)
	serverCut := <-polled
	rss := residentMiB(p)
	queued, most := sendQueues(p.url, "127.0.0.2", "127.0.0.3")

	var wg sync.WaitGroup
	drainStart := time.Now()
	results := make([]slowResult, len(streams))
	for i, s := range streams {
		wg.Go(func() { results[i] = s.drain(3 * time.Second) })
	}
	wg.Wait()
	drained := time.Since(drainStart)
	var cut, resyncLast int
	var notCut, noResync []string
	type tally struct{ n, cut, resyncLast int }
	var kinds []string
	byKind := map[string]*tally{}
	for i, r := range results {
		kind := streams[i].kind()
		if byKind[kind] == nil {
			byKind[kind] = &tally{}
			kinds = append(kinds, kind)
		}
		k := byKind[kind]
		k.n++
		if r.ended {
			cut++
			k.cut++
		} else {
			notCut = append(notCut, fmt.Sprintf("%s (%d bytes read)", streams[i].name(), r.bytes))
		}
		if r.resyncLast {
			resyncLast++
			k.resyncLast++
		} else if r.ended {
			noResync = append(noResync, fmt.Sprintf("%s (last message %.80q, %d bytes)", streams[i].name(), r.last, r.bytes))
		}
	}
	t.Logf("%d slow streams for %v: the server counted %d cut for their unacknowledged bytes before any read, the last %v after they opened; read then (in %v): %d ended, %d with RESYNC last",
		len(streams), slowStreamsFor, serverCut, lastCutAfter.Round(250*time.Millisecond), drained.Round(time.Millisecond), cut, resyncLast)
	for _, kind := range kinds {
		k := byKind[kind]
		t.Logf("  %s: %d, %d ended, %d with RESYNC last", kind, k.n, k.cut, k.resyncLast)
	}
	t.Logf("server RSS %d MiB before the streams, %d MiB with them (%.1f KiB a stream)", base, rss, float64((rss-base)<<10)/float64(len(streams)))
	t.Logf("server send queues to the slow clients: %d KiB in all, at most %d KiB on one connection", queued>>10, most>>10)
	t.Logf("well-behaved quiet: %.0f Acquires/s, %v", quietRate, quiet)
	t.Logf("well-behaved beside the slow streams: %.0f Acquires/s (%.0f%% of quiet), %v", abusedRate, 100*abusedRate/quietRate, abused)
	quiet.check(t)
	abused.check(t)
	if most > 2*server.DefaultStreamUnackedBytes {
		t.Errorf("a connection to a slow client holds %d KiB in the server's send queue, more than twice --stream-unacked-bytes (%d KiB)", most>>10, server.DefaultStreamUnackedBytes>>10)
	}
	if len(notCut) > 0 {
		t.Errorf("%d of %d streams that never read for %v were not cut: %s",
			len(notCut), len(streams), slowStreamsFor, strings.Join(notCut[:min(5, len(notCut))], ", "))
	}
	if len(noResync) > 0 {
		t.Errorf("%d streams were cut without RESYNC as their last message: %s", len(noResync), strings.Join(noResync[:min(5, len(noResync))], "; "))
	}
}

// cutCount is the server's count of streams cut for their unacknowledged
// bytes, 0 when it has none.
func cutCount(url string) int {
	for lim := range strings.SplitSeq(limitRefusals(url), ", ") {
		if v, ok := strings.CutPrefix(lim, "stream-unacked-bytes "); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

// sendQueues returns the bytes in the send queues of the server at url's
// sockets to the addresses ips (sent and not acknowledged, or not yet
// sent: /proc/net/tcp's tx_queue), in all and on the fullest; zeros where
// /proc does not say.
func sendQueues(url string, ips ...string) (total, most int) {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return 0, 0
	}
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(url, "http://"))
	p, _ := strconv.Atoi(port)
	local := fmt.Sprintf(":%04X", p)
	remote := map[string]bool{}
	for _, ip := range ips {
		v4 := net.ParseIP(ip).To4()
		remote[fmt.Sprintf("%02X%02X%02X%02X", v4[3], v4[2], v4[1], v4[0])] = true
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || !strings.HasSuffix(f[1], local) || !remote[strings.Split(f[2], ":")[0]] {
			continue
		}
		tx, _, _ := strings.Cut(f[4], ":")
		n, _ := strconv.ParseInt(tx, 16, 64)
		total += int(n)
		most = max(most, int(n))
	}
	return total, most
}

// slowStreamsFor is how long the slow streams stay unread.
const slowStreamsFor = 40 * time.Second

// wellBehavedFor runs the well-behaved client for d and returns its result
// and its Acquires a second.
func wellBehavedFor(t *testing.T, url string, d time.Duration) (wellBehavedResult, float64) {
	start := time.Now()
	g := runWellBehaved(t, url)
	time.Sleep(d) // the sample
	res := g.stop(t)
	return res, float64(res.Acquires) / time.Since(start).Seconds()
}

// slowStream is a stream whose client has not read anything yet.
type slowStream interface {
	kind() string // what stream, over which protocol
	name() string
	// drain reads the stream until it ends, or until nothing arrives for
	// idle (a backlog still arriving is not an open stream).
	drain(idle time.Duration) slowResult
}

type slowResult struct {
	ended      bool   // the server ended the stream or closed its connection
	resyncLast bool   // its last message is RESYNC (Watch) or "resync" (dashboard)
	last       string // its last message
	bytes      int    // the bytes of the stream's body read
}

// watchRequestH1 is a Connect Watch call of every key over HTTP/1.1.
func watchRequestH1() string {
	env := watchEnvelope()
	return fmt.Sprintf("POST /fenced.v1.LeaseService/Watch HTTP/1.1\r\nHost: x\r\nContent-Type: application/connect+json\r\nContent-Length: %d\r\n\r\n%s", len(env), env)
}

// watchEnvelope is the Connect envelope of a Watch request of every key.
func watchEnvelope() string {
	const msg = `{"prefix":""}`
	return string(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))) + msg
}

// h1Stream is a stream over an HTTP/1.1 connection of its own.
type h1Stream struct {
	c     net.Conn
	watch bool
}

// slowH1 opens a connection from ip to url's host and sends req on it.
func slowH1(t *testing.T, ip, url, req string) *h1Stream {
	c, _ := dialFrom(t, ip, url)
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	return &h1Stream{c: c, watch: strings.HasPrefix(req, "POST")}
}

func (s *h1Stream) kind() string {
	if s.watch {
		return "Watch over HTTP/1.1"
	}
	return "dashboard over HTTP/1.1"
}

func (s *h1Stream) name() string { return s.kind() + " from " + s.c.LocalAddr().String() }

func (s *h1Stream) drain(idle time.Duration) slowResult {
	resp, err := http.ReadResponse(bufio.NewReader(newIdleReader(s.c, idle)), nil)
	if err != nil {
		return slowResult{ended: !isTimeout(err), last: err.Error()}
	}
	body, err := io.ReadAll(resp.Body)
	// A body cut short (unexpected EOF, reset) ended too; only the read
	// deadline means the stream is still open.
	r := slowResult{ended: err == nil || !isTimeout(err), bytes: len(body)}
	r.last, r.resyncLast = lastMessage(body, s.watch)
	return r
}

// h2Stream is one stream of an HTTP/2 connection shared with others.
type h2Stream struct {
	conn  *h2Conn
	id    uint32
	watch bool
}

// h2Conn is an HTTP/2 connection without TLS whose client grants the
// largest windows and reads nothing until drained.
type h2Conn struct {
	c      net.Conn
	once   sync.Once
	data   map[uint32]*bytes.Buffer
	ended  map[uint32]bool
	closed bool // EOF, reset or GOAWAY
}

// slowH2 opens n streams from ip to url's host, perConn per connection:
// Watch calls of every key (watch) or dashboard event streams.
func slowH2(t *testing.T, ip, url string, n, perConn int, watch bool) []slowStream {
	var streams []slowStream
	for n > 0 {
		c, _ := dialFrom(t, ip, url)
		conn := &h2Conn{c: c, data: map[uint32]*bytes.Buffer{}, ended: map[uint32]bool{}}
		var out bytes.Buffer
		out.WriteString("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
		// SETTINGS: INITIAL_WINDOW_SIZE 2^31-1; then the connection's
		// window to 2^31-1 too.
		writeFrame(&out, 0x4, 0, 0, []byte{0, 4, 0x7f, 0xff, 0xff, 0xff})
		writeFrame(&out, 0x8, 0, 0, binary.BigEndian.AppendUint32(nil, 1<<31-1-65535))
		for i := range min(n, perConn) {
			id := uint32(2*i + 1)
			var hdr []byte
			if watch {
				hdr = hpackLiterals(":method", "POST", ":scheme", "http", ":authority", "x",
					":path", "/fenced.v1.LeaseService/Watch", "content-type", "application/connect+json")
				writeFrame(&out, 0x1, 0x4, id, hdr)                     // HEADERS, END_HEADERS
				writeFrame(&out, 0x0, 0x1, id, []byte(watchEnvelope())) // DATA, END_STREAM
			} else {
				hdr = hpackLiterals(":method", "GET", ":scheme", "http", ":authority", "x", ":path", "/v1/events")
				writeFrame(&out, 0x1, 0x5, id, hdr) // HEADERS, END_HEADERS|END_STREAM
			}
			conn.data[id] = new(bytes.Buffer)
			streams = append(streams, &h2Stream{conn: conn, id: id, watch: watch})
		}
		if _, err := c.Write(out.Bytes()); err != nil {
			t.Fatal(err)
		}
		n -= perConn
	}
	return streams
}

func writeFrame(w *bytes.Buffer, typ, flags byte, stream uint32, payload []byte) {
	w.Write([]byte{byte(len(payload) >> 16), byte(len(payload) >> 8), byte(len(payload)), typ, flags})
	w.Write(binary.BigEndian.AppendUint32(nil, stream))
	w.Write(payload)
}

// hpackLiterals encodes name, value pairs as HPACK literals without
// indexing, with new names and no Huffman coding (each under 127 bytes).
func hpackLiterals(kv ...string) []byte {
	var b []byte
	for i := 0; i < len(kv); i += 2 {
		b = append(b, 0, byte(len(kv[i])))
		b = append(b, kv[i]...)
		b = append(b, byte(len(kv[i+1])))
		b = append(b, kv[i+1]...)
	}
	return b
}

func (s *h2Stream) kind() string {
	if s.watch {
		return "Watch over HTTP/2"
	}
	return "dashboard over HTTP/2"
}

func (s *h2Stream) name() string {
	return fmt.Sprintf("%s from %v, stream %d", s.kind(), s.conn.c.LocalAddr(), s.id)
}

func (s *h2Stream) drain(idle time.Duration) slowResult {
	s.conn.once.Do(func() { s.conn.read(idle) })
	body := s.conn.data[s.id].Bytes()
	r := slowResult{ended: s.conn.ended[s.id] || s.conn.closed, bytes: len(body)}
	r.last, r.resyncLast = lastMessage(body, s.watch)
	return r
}

// read reads the connection's frames for d, or until it closes or every
// stream ended, keeping each stream's DATA.
func (c *h2Conn) read(idle time.Duration) {
	br := bufio.NewReader(newIdleReader(c.c, idle))
	var hdr [9]byte
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			c.closed = !isTimeout(err)
			return
		}
		n := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
		typ, flags, id := hdr[3], hdr[4], binary.BigEndian.Uint32(hdr[5:])&(1<<31-1)
		payload := make([]byte, n)
		if _, err := io.ReadFull(br, payload); err != nil {
			c.closed = !isTimeout(err)
			return
		}
		switch typ {
		case 0x0: // DATA
			if flags&0x8 != 0 { // PADDED
				payload = payload[1 : len(payload)-int(payload[0])]
			}
			if b := c.data[id]; b != nil {
				b.Write(payload)
			}
			c.ended[id] = c.ended[id] || flags&0x1 != 0
		case 0x1: // HEADERS (trailers end a stream too)
			c.ended[id] = c.ended[id] || flags&0x1 != 0
		case 0x3: // RST_STREAM
			c.ended[id] = true
		case 0x7: // GOAWAY
			c.closed = true
			return
		}
	}
}

// idleReader reads c, failing with a timeout once nothing has arrived for
// idle, and in any case after drainAtMost.
type idleReader struct {
	c     net.Conn
	idle  time.Duration
	until time.Time
}

// drainAtMost bounds a drain that keeps receiving.
const drainAtMost = 30 * time.Second

func newIdleReader(c net.Conn, idle time.Duration) *idleReader {
	return &idleReader{c: c, idle: idle, until: time.Now().Add(drainAtMost)}
}

func (r *idleReader) Read(p []byte) (int, error) {
	deadline := time.Now().Add(r.idle)
	if deadline.After(r.until) {
		deadline = r.until
	}
	r.c.SetReadDeadline(deadline)
	return r.c.Read(p)
}

// lastMessage returns the last message of a stream's body and whether it
// is RESYNC: of a Watch, the last Connect envelope that is not the end of
// the stream; of a dashboard, the last server-sent event.
func lastMessage(body []byte, watch bool) (string, bool) {
	if !watch {
		var last string
		for ev := range strings.SplitSeq(string(body), "\n\n") {
			if strings.HasPrefix(ev, "event:") {
				last = ev
			}
		}
		return last, strings.HasPrefix(last, "event: resync\n")
	}
	var last string
	for len(body) >= 5 {
		n := int(binary.BigEndian.Uint32(body[1:5]))
		if len(body) < 5+n {
			break // cut in the middle of a message
		}
		if body[0]&0x2 == 0 {
			last = string(body[5 : 5+n])
		}
		body = body[5+n:]
	}
	return last, strings.Contains(last, `"type":"RESYNC"`)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
