package fencereport_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencereport"
	"github.com/fencedio/fenced/internal/testutil"
)

// BenchmarkGuardedWrite compares guarded writes to a memory guard without
// a reporter and with one whose fenced is down (nothing listens) or hangs
// (never answers). Rejected writes each present a different stale token,
// so that no two share a queue entry; accepted writes are not reported.
// Compare with: benchstat -col /reporter
func BenchmarkGuardedWrite(b *testing.B) {
	addr, err := testutil.FreeAddr()
	if err != nil {
		b.Fatal(err)
	}
	down, err := client.New(client.Config{Endpoint: "http://" + addr, FailoverTimeout: 50 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	}))
	defer hang.Close()
	slow, err := client.New(client.Config{Endpoint: hang.URL})
	if err != nil {
		b.Fatal(err)
	}
	for _, write := range []string{"rejected", "accepted"} {
		for _, rc := range []struct {
			name   string
			sender fencereport.Sender
		}{{"none", nil}, {"down", down}, {"slow", slow}} {
			b.Run("write="+write+"/reporter="+rc.name, func(b *testing.B) {
				var obs fence.Observer = fence.Observers{}
				var rep *fencereport.Reporter
				if rc.sender != nil {
					rep, err = fencereport.New(fencereport.Config{Resource: "bench", Sender: rc.sender,
						FlushInterval: 10 * time.Millisecond, SendTimeout: 100 * time.Millisecond})
					if err != nil {
						b.Fatal(err)
					}
					obs = rep
				}
				g := fence.NewMemory(fence.MemoryConfig{Observer: obs})
				ctx := fence.WithOwner(context.Background(), "worker-A")
				const highest = 1 << 40
				if err := g.Do(ctx, "jobs/1", highest, nop); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				i := uint64(0)
				for b.Loop() {
					i++
					token := highest - 1 - i%(1<<20)
					if write == "accepted" {
						token = highest
					}
					_ = g.Do(ctx, "jobs/1", token, nop)
				}
				if rep != nil {
					cctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
					rep.Close(cctx)
					cancel()
					if write == "rejected" && rep.Sent() != 0 {
						b.Fatalf("sent %d to a fenced that is not there", rep.Sent())
					}
					b.ReportMetric(float64(rep.Dropped())/float64(b.N), "dropped/op")
				}
			})
		}
	}
}
