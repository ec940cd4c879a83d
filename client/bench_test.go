package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/fencedio/fenced/api/fenced/v1/fencedv1connect"
	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/internal/testutil"
)

// benchClient returns a client of a fake server on loopback that answers
// at once, so that the figures are mostly the client's own (the fake's
// Connect handler and net/http server run in this process too, at a
// constant cost).
func benchClient(b *testing.B) *client.Client {
	return benchClientConfig(b, &fakeService{}, client.Config{})
}

// benchClientConfig is benchClient with cfg, serving fake; with Session on,
// it returns once calls go over the Session stream.
func benchClientConfig(b *testing.B, fake *fakeService, cfg client.Config) *client.Client {
	// As the server: small answers uncompressed.
	_, h := fencedv1connect.NewLeaseServiceHandler(fake, connect.WithCompressMinBytes(4<<10))
	ts := httptest.NewUnstartedServer(h)
	ts.Config.Protocols = new(http.Protocols)
	ts.Config.Protocols.SetHTTP1(true)
	ts.Config.Protocols.SetUnencryptedHTTP2(true)
	ts.Start()
	b.Cleanup(ts.Close)
	cfg.Endpoint, cfg.TTL = ts.URL, 10*time.Second
	c, err := client.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	// The first call opens the stream; calls go over it once it is probed.
	for start := time.Now(); !cfg.DisableSession; time.Sleep(time.Millisecond) {
		if _, calls := fake.sessionCounts(); calls > 0 {
			break
		}
		if time.Since(start) > 5*time.Second {
			b.Fatal("no call over the Session stream after 5s")
		}
		c.Renew(context.Background(), "bench/warm-up", "0123")
	}
	return c
}

// transports runs f with calls over the Session stream and as unary calls
// (Config.DisableSession), as sub-benchmarks that benchstat -col /transport
// compares.
func transports(b *testing.B, f func(b *testing.B, c *client.Client)) {
	for _, disable := range []bool{false, true} {
		name := "transport=session"
		if disable {
			name = "transport=unary"
		}
		b.Run(name, func(b *testing.B) {
			f(b, benchClientConfig(b, &fakeService{}, client.Config{DisableSession: disable}))
		})
	}
}

// reportCPU reports the CPU time (user and system) of the process per
// operation as cpu-ns/op: less sensitive than ns/op to other load on a
// shared machine. It includes the fake server's share.
func reportCPU(b *testing.B) {
	start := testutil.ProcessCPU()
	b.Cleanup(func() {
		if b.N > 0 {
			b.ReportMetric(float64(testutil.ProcessCPU()-start)/float64(b.N), "cpu-ns/op")
		}
	})
}

func BenchmarkClientAcquireRelease(b *testing.B) {
	transports(b, func(b *testing.B, c *client.Client) {
		ctx := context.Background()
		b.ReportAllocs()
		reportCPU(b)
		for b.Loop() {
			l, err := c.Acquire(ctx, "bench/1")
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkClientRenew(b *testing.B) {
	transports(b, func(b *testing.B, c *client.Client) {
		ctx := context.Background()
		b.ReportAllocs()
		reportCPU(b)
		for b.Loop() {
			if _, err := c.Renew(ctx, "bench/1", "0123456789abcdef0123456789abcdef"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkClientRenewStream renews as leases do, over the shared stream.
func BenchmarkClientRenewStream(b *testing.B) {
	c := benchClient(b)
	renew, done := client.HoldRenewals(c)
	defer done()
	b.ReportAllocs()
	reportCPU(b)
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := renew(ctx, "bench/1", "0123456789abcdef0123456789abcdef")
		cancel()
		if err != nil {
			b.Fatal(err)
		}
	}
}
