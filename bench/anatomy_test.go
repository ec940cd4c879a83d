package bench

import (
	"math"
	"testing"
)

// The output of `go tool pprof -traces` for four samples: a socket write
// under the HTTP/2 server, an fsync under raft-wal, an allocation in
// fenced's handler, and a goroutine parking.
const pprofTraces = `File: fenced
Type: cpu
Duration: 3s, Total samples = 100ms ( 3.33%)
-----------+-------------------------------------------------------
      40ms   internal/runtime/syscall/linux.Syscall6
             syscall.write
             internal/poll.(*FD).Write
             net.(*netFD).Write
             net/http.(*http2serverConn).writeFrameAsync
-----------+-------------------------------------------------------
      30ms   internal/runtime/syscall/linux.Syscall6
             syscall.Fsync
             github.com/hashicorp/raft-wal/segment.(*Writer).sync
             github.com/hashicorp/raft.(*Raft).leaderLoop
-----------+-------------------------------------------------------
      20ms   runtime.mallocgc
             github.com/fencedio/fenced/server.(*Server).applyAsync
             github.com/hashicorp/raft.(*Raft).Apply
             connectrpc.com/connect.NewBidiStreamHandler[go.shape.struct { Id uint64 }].func1
-----------+-------------------------------------------------------
      10ms   runtime.findRunnable
             runtime.schedule
             runtime.park_m
             runtime.mcall
-----------+-------------------------------------------------------
`

func TestSplitCPU(t *testing.T) {
	parts, err := splitCPU(pprofTraces, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{ // µs per cycle: 10 cycles
		"socket reads and writes (system calls)": 4000,
		"fsync of the raft log":                  3000,
		"fenced: server's Session stream, handlers, admission, metrics; the client library": 2000,
		"Go scheduler: parking, finding work, waking threads":                               1000,
	}
	if len(parts) != len(want) {
		t.Fatalf("parts %+v, want %v", parts, want)
	}
	for i, p := range parts {
		if math.Abs(p.Us-want[p.Part]) > 1e-9 {
			t.Errorf("%q: %.1f µs, want %.1f", p.Part, p.Us, want[p.Part])
		}
		if i > 0 && p.Us > parts[i-1].Us {
			t.Errorf("parts not largest first: %+v", parts)
		}
	}
	if parts[0].Percent != 40 {
		t.Errorf("socket share %.1f%%, want 40%%", parts[0].Percent)
	}
	if _, err := splitCPU("File: fenced\n", 10); err == nil {
		t.Error("a profile without samples split without an error")
	}
}
