package server

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/fencedio/fenced/lease"
	"github.com/fencedio/fenced/server/internal/admission"
	"github.com/fencedio/fenced/server/internal/expiry"
	"github.com/fencedio/fenced/server/internal/fsm"
	"github.com/fencedio/fenced/server/internal/rejections"
	"github.com/hashicorp/raft"
)

// BenchmarkLiveLeaseMemory measures the heap a node keeps per live lease:
// the state machine, the leader's deadlines and the count of leases per
// client address, fed through the FSM the way raft feeds a node, with the
// keys, owners and lease IDs of the bench/ memory workload (an owner per
// 50,000 leases, every lease granted to one client address). It reports
// live heap bytes per lease after a collection; -benchtime=1000000x gives
// a million leases, and -memprofile shows where the bytes are.
func BenchmarkLiveLeaseMemory(b *testing.B) {
	e := expiry.New(func(uint64, []lease.Lease) {})
	g := rejections.NewGrantMemory()
	clients := admission.NewLeases(admission.Networks{V4: DefaultClientNetworkV4, V6: DefaultClientNetworkV6})
	f := fsm.New(0, fsm.Hooks{Events: func(events []lease.Event) {
		for _, ev := range events {
			if ev.Type == lease.Acquired {
				e.Add(ev.Held(), time.Now())
				g.Record(ev, time.Time{})
				clients.Add("127.0.0.1", ev.Held(), func() bool { return true })
			}
		}
	}})
	before := liveHeap()
	const batch = 512
	logs := make([]*raft.Log, 0, batch)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c := lease.Command{Op: lease.OpAcquire, Key: fmt.Sprintf("fencedbench/memory/%08d", i), ID: newLeaseID(),
			Owner: fmt.Sprintf("fencedbench/%d", i/50_000), TTL: time.Hour}
		data, err := c.MarshalBinary()
		if err != nil {
			b.Fatal(err)
		}
		logs = append(logs, &raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: data})
		if len(logs) == batch || i == b.N-1 {
			f.ApplyBatch(logs)
			logs = logs[:0]
		}
	}
	b.StopTimer()
	if f.View().Len() != b.N {
		b.Fatalf("%d leases, want %d", f.View().Len(), b.N)
	}
	b.ReportMetric(float64(liveHeap()-before)/float64(b.N), "heapB/lease")
	liveLeases = []any{f, e, g, clients} // still live when -memprofile is written
}

// liveLeases keeps the last BenchmarkLiveLeaseMemory's structures reachable
// until the test binary writes its heap profile.
var liveLeases []any

func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
