package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The transport floor: a tiny echo (a 40-byte wrapperspb.BytesValue) over
// the bare RPC stacks, with no fenced or etcd code on either side. fenced
// serves Connect over net/http (unary calls over HTTP/1.1, its KeepAlive
// stream over h2c); etcd serves grpc-go. The server runs in a child process
// (this test binary, TestFloorServer) so that its CPU and the clients' can
// be read apart, as the harness does:
//
//	go test -run '^$' -bench BenchmarkFloor -benchtime 3s -count 3 .
//
// Every client has its own connection. Stream variants keep one message in
// flight per stream: send, wait for the echo, send the next.

const (
	floorEnv       = "FENCED_FLOOR_SERVER" // the server kind TestFloorServer serves
	floorAddrLine  = "floor-addr "
	floorUnaryPath = "/floor.v1.Echo/Unary"
	floorStreamPth = "/floor.v1.Echo/Stream"
)

// floorPayload is the echoed message: about the size of a renewal.
var floorPayload = &wrapperspb.BytesValue{Value: bytes.Repeat([]byte{'x'}, 40)}

// TestFloorServer is the server process of BenchmarkFloor. Without
// FENCED_FLOOR_SERVER it returns at once. With it, it serves that kind of
// echo server on 127.0.0.1, writes its address and returns when stdin
// closes.
func TestFloorServer(t *testing.T) {
	kind := os.Getenv(floorEnv)
	if kind == "" {
		t.Skip("the server process of BenchmarkFloor; runs only when the benchmark starts it")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var stop func()
	switch kind {
	case "connect-http1", "connect-h2c", "connect-h2c-buf":
		// connect-go gzips every response to a client that accepts gzip,
		// as its clients do by default; fenced compresses nothing below
		// 64 KiB (server/api.go) and grpc-go compresses nothing
		// unless asked.
		noGzip := connect.WithCompressMinBytes(64 << 10)
		mux := http.NewServeMux()
		mux.Handle(floorUnaryPath, connect.NewUnaryHandler(floorUnaryPath,
			func(_ context.Context, req *connect.Request[wrapperspb.BytesValue]) (*connect.Response[wrapperspb.BytesValue], error) {
				return connect.NewResponse(req.Msg), nil
			}, noGzip))
		mux.Handle(floorStreamPth, connect.NewBidiStreamHandler(floorStreamPth,
			func(_ context.Context, s *connect.BidiStream[wrapperspb.BytesValue, wrapperspb.BytesValue]) error {
				for {
					m, err := s.Receive()
					if errors.Is(err, io.EOF) {
						return nil
					} else if err != nil {
						return err
					}
					if err := s.Send(m); err != nil {
						return err
					}
				}
			}, noGzip))
		protocols := new(http.Protocols)
		protocols.SetHTTP1(true)
		if kind != "connect-http1" {
			protocols.SetUnencryptedHTTP2(true)
		}
		srv := &http.Server{Handler: mux, Protocols: protocols, ReadHeaderTimeout: 10 * time.Second}
		var served net.Listener = ln
		if kind == "connect-h2c-buf" {
			served = floorBufferedListener{ln}
		}
		go srv.Serve(served)
		stop = func() { srv.Close() }
	case "grpc":
		srv := grpc.NewServer()
		srv.RegisterService(&floorGRPCService, struct{}{})
		go srv.Serve(ln)
		stop = srv.Stop
	default:
		t.Fatalf("%s=%q: unknown server kind", floorEnv, kind)
	}
	defer stop()
	fmt.Printf("%s%s\n", floorAddrLine, ln.Addr())
	io.Copy(io.Discard, os.Stdin) // until the benchmark closes it
}

// floorGRPCService is the echo for grpc-go, written out by hand: what
// protoc-gen-go-grpc would generate for a unary and a bidi method.
var floorGRPCService = grpc.ServiceDesc{
	ServiceName: "floor.v1.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Unary",
		Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.BytesValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			return in, nil
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName: "Stream",
		Handler: func(_ any, s grpc.ServerStream) error {
			for {
				m := new(wrapperspb.BytesValue)
				if err := s.RecvMsg(m); errors.Is(err, io.EOF) {
					return nil
				} else if err != nil {
					return err
				}
				if err := s.SendMsg(m); err != nil {
					return err
				}
			}
		},
		ServerStreams: true,
		ClientStreams: true,
	}},
}

// floorClient is one benchmark client: call makes one echo round trip.
type floorClient struct {
	call  func(context.Context) error
	close func()
}

type floorVariant struct {
	name   string
	server string // TestFloorServer kind
	dial   func(ctx context.Context, addr string) (*floorClient, error)
}

var floorVariants = []floorVariant{
	{"connect-unary-http1", "connect-http1", func(ctx context.Context, addr string) (*floorClient, error) {
		return connectUnaryClient(addr, false)
	}},
	// With the fenced client's request wrapper (inMemoryBodies in
	// client/transport.go): the headers and the body leave in one write.
	{"connect-unary-http1-inmem", "connect-http1", func(ctx context.Context, addr string) (*floorClient, error) {
		return connectUnaryClient(addr, true)
	}},
	{"grpc-unary", "grpc", func(ctx context.Context, addr string) (*floorClient, error) {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		return &floorClient{
			call: func(ctx context.Context) error {
				return conn.Invoke(ctx, floorUnaryPath, floorPayload, new(wrapperspb.BytesValue))
			},
			close: func() { conn.Close() },
		}, nil
	}},
	{"connect-stream-h2c", "connect-h2c", func(ctx context.Context, addr string) (*floorClient, error) {
		return connectStreamClient(ctx, addr, false)
	}},
	// With the fenced client's stream body wrapper (wholeMessages in
	// client/transport.go): each message leaves in one DATA frame.
	{"connect-stream-h2c-whole", "connect-h2c", func(ctx context.Context, addr string) (*floorClient, error) {
		return connectStreamClient(ctx, addr, true)
	}},
	// And with the fenced server's read buffer under the connection
	// (admission.BufferedListener in server/internal/admission/bufconn.go): fenced's own stream setup.
	{"connect-stream-h2c-fenced", "connect-h2c-buf", func(ctx context.Context, addr string) (*floorClient, error) {
		return connectStreamClient(ctx, addr, true)
	}},
	{"grpc-stream", "grpc", func(ctx context.Context, addr string) (*floorClient, error) {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithCancel(ctx)
		s, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, floorStreamPth)
		if err != nil {
			cancel()
			conn.Close()
			return nil, err
		}
		return &floorClient{
			call: func(context.Context) error {
				if err := s.SendMsg(floorPayload); err != nil {
					return err
				}
				return s.RecvMsg(new(wrapperspb.BytesValue))
			},
			close: func() { s.CloseSend(); cancel(); conn.Close() },
		}, nil
	}},
}

// connectUnaryClient calls over HTTP/1.1 keep-alive, as the fenced client's
// unary transport does (client/transport.go).
func connectUnaryClient(addr string, inmem bool) (*floorClient, error) {
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	tr := &http.Transport{
		Protocols:           protocols,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 100,
		IdleConnTimeout:     90 * time.Second,
	}
	var rt http.RoundTripper = tr
	if inmem {
		rt = floorInMemoryBodies{tr}
	}
	c := connect.NewClient[wrapperspb.BytesValue, wrapperspb.BytesValue](&http.Client{Transport: rt}, "http://"+addr+floorUnaryPath)
	return &floorClient{
		call: func(ctx context.Context) error {
			_, err := c.CallUnary(ctx, connect.NewRequest(floorPayload))
			return err
		},
		close: tr.CloseIdleConnections,
	}, nil
}

// connectStreamClient opens one bidi stream over h2c, with the settings of
// the fenced client's stream transport (client/transport.go).
func connectStreamClient(ctx context.Context, addr string, whole bool) (*floorClient, error) {
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	tr := &http.Transport{
		Protocols:           protocols,
		HTTP2:               &http.HTTP2Config{SendPingTimeout: 3 * time.Second, PingTimeout: 2 * time.Second},
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 100,
		IdleConnTimeout:     90 * time.Second,
	}
	var rt http.RoundTripper = tr
	if whole {
		rt = floorWholeMessages{tr}
	}
	c := connect.NewClient[wrapperspb.BytesValue, wrapperspb.BytesValue](&http.Client{Transport: rt}, "http://"+addr+floorStreamPth)
	ctx, cancel := context.WithCancel(ctx)
	s := c.CallBidiStream(ctx)
	return &floorClient{
		call: func(context.Context) error {
			if err := s.Send(floorPayload); err != nil {
				return err
			}
			_, err := s.Receive()
			return err
		},
		close: func() { s.CloseRequest(); s.CloseResponse(); cancel(); tr.CloseIdleConnections() },
	}, nil
}

// floorBufferedListener is the fenced server's bufferedListener: the
// HTTP/2 server reads a frame's header and its payload in separate reads,
// which through the buffer usually take one system call.
type floorBufferedListener struct{ net.Listener }

func (l floorBufferedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &floorBufferedConn{Conn: c, r: bufio.NewReaderSize(c, 4<<10)}, nil
}

type floorBufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *floorBufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// floorInMemoryBodies is the fenced client's inMemoryBodies: the request
// body in a bytes.Reader, so that net/http writes headers and body at once.
type floorInMemoryBodies struct{ next http.RoundTripper }

func (t floorInMemoryBodies) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength <= 0 || r.ContentLength > 1<<20 {
		return t.next.RoundTrip(r)
	}
	body := make([]byte, r.ContentLength)
	_, err := io.ReadFull(r.Body, body)
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	r2 := r.WithContext(r.Context())
	r2.Body = io.NopCloser(bytes.NewReader(body))
	r2.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return t.next.RoundTrip(r2)
}

// floorWholeMessages is the fenced client's wholeMessages: every Read of a
// stream's request body returns whole length-prefixed messages.
type floorWholeMessages struct{ next http.RoundTripper }

func (t floorWholeMessages) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength >= 0 {
		return t.next.RoundTrip(r)
	}
	r2 := r.WithContext(r.Context())
	r2.Body = &floorMessageReader{body: r.Body}
	return t.next.RoundTrip(r2)
}

type floorMessageReader struct {
	body   io.ReadCloser
	prefix [5]byte
	got    int
	rest   uint32
}

func (m *floorMessageReader) Read(p []byte) (int, error) {
	n, err := m.body.Read(p)
	m.advance(p[:n])
	for err == nil && n < len(p) && (m.got > 0 || m.rest > 0) {
		var k int
		k, err = m.body.Read(p[n:])
		m.advance(p[n : n+k])
		n += k
	}
	return n, err
}

func (m *floorMessageReader) advance(b []byte) {
	for len(b) > 0 {
		if m.rest > 0 {
			k := min(uint32(len(b)), m.rest)
			m.rest -= k
			b = b[k:]
			continue
		}
		k := copy(m.prefix[m.got:], b)
		m.got += k
		b = b[k:]
		if m.got == len(m.prefix) {
			m.got = 0
			m.rest = binary.BigEndian.Uint32(m.prefix[1:])
		}
	}
}

func (m *floorMessageReader) Close() error { return m.body.Close() }

// BenchmarkFloor measures each variant with 1 and 16 clients (16 as in the
// renew-stream workload). Besides ns/op it reports ops/s and the CPU time
// per call of the server process (/proc/PID/stat, 10 ms ticks) and of this
// process (getrusage: the clients and the Go runtime's work for them).
func BenchmarkFloor(b *testing.B) {
	for _, v := range floorVariants {
		for _, n := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/clients=%d", v.name, n), func(b *testing.B) { benchFloor(b, v, n) })
		}
	}
}

func benchFloor(b *testing.B, v floorVariant, nclients int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	b.Cleanup(cancel)
	srv, addr := startFloorServer(b, v.server)
	clients := make([]*floorClient, nclients)
	for i := range clients {
		c, err := v.dial(ctx, addr)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.close)
		// Warm up: the connection, the stream and the server's
		// goroutines exist before the clock and the CPU readings start.
		for range 10 {
			if err := c.call(ctx); err != nil {
				b.Fatalf("%s warm-up: %v", v.name, err)
			}
		}
		clients[i] = c
	}
	var (
		left   atomic.Int64
		wg     sync.WaitGroup
		errMu  sync.Mutex
		runErr error
	)
	left.Store(int64(b.N))
	srv0, err := procCPU(srv.pid())
	if err != nil {
		b.Fatal(err)
	}
	self0 := selfCPU()
	b.ResetTimer()
	start := time.Now()
	for _, c := range clients {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if err := c.call(ctx); err != nil {
					errMu.Lock()
					runErr = errors.Join(runErr, err)
					errMu.Unlock()
					cancel()
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	self1 := selfCPU()
	srv1, err := procCPU(srv.pid())
	if err != nil {
		b.Fatal(err)
	}
	if runErr != nil {
		b.Fatal(runErr)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
	b.ReportMetric(float64(srv1-srv0)/float64(b.N), "server-cpu-ns/op")
	b.ReportMetric(float64(self1-self0)/float64(b.N), "client-cpu-ns/op")
}

// startFloorServer starts this test binary as TestFloorServer of the given
// kind and returns it with its address. b's cleanup stops it.
func startFloorServer(b *testing.B, kind string) (*proc, string) {
	logPath := filepath.Join(b.TempDir(), "server.log")
	p, err := startProc("floor-"+kind, os.Args[0],
		[]string{"-test.run=^TestFloorServer$", "-test.count=1", "-test.timeout=30m"},
		[]string{floorEnv + "=" + kind}, logPath, true)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.stop(5 * time.Second) })
	var addr string
	err = p.waitReady(context.Background(), 30*time.Second, func(context.Context) error {
		out, err := os.ReadFile(logPath)
		if err != nil {
			return err
		}
		for line := range strings.Lines(string(out)) {
			if a, ok := strings.CutPrefix(strings.TrimSpace(line), floorAddrLine); ok {
				addr = a
				return nil
			}
		}
		return errors.New("no address yet")
	})
	if err != nil {
		b.Fatal(err)
	}
	return p, addr
}
