package logs

import (
	"io"
	"sync"
)

// logBatchLimit bounds the bytes a Writer gathers before it writes them
// out anyway, so a large batch (a burst of expiries) holds little memory.
const logBatchLimit = 64 << 10

// A Writer is the writer under Config.Logger's handler, handed to the
// server as Config.LogOutput so that it can write the transition records
// of one applied batch of commits with one write instead of one each.
// Under load a batch carries tens of transitions, and a write(2) per
// record was about 5% of the server's CPU.
//
// Outside a batch every Write goes straight through. During one, records
// from any goroutine are kept in order in memory, for as long as the
// state machine takes to apply the batch (at most logBatchLimit bytes),
// and then written together. A process killed in that window loses those
// records from the log, not the transitions: they are in raft's log.
// Safe for concurrent use.
type Writer struct {
	mu       sync.Mutex
	w        io.Writer
	gathered bool
	buf      []byte
}

// NewWriter returns a Writer that writes to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write writes p, or keeps it for the end of the batch being applied.
func (lw *Writer) Write(p []byte) (int, error) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if !lw.gathered {
		return lw.w.Write(p)
	}
	lw.buf = append(lw.buf, p...)
	if len(lw.buf) >= logBatchLimit {
		if err := lw.writeGathered(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// Gather keeps what is written from now until Flush. A nil Writer
// does nothing.
func (lw *Writer) Gather() {
	if lw == nil {
		return
	}
	lw.mu.Lock()
	lw.gathered = true
	lw.mu.Unlock()
}

// Flush writes what was kept since Gather, in one write, and lets writes
// through again. The handler above would have ignored a failed write too.
func (lw *Writer) Flush() {
	if lw == nil {
		return
	}
	lw.mu.Lock()
	defer lw.mu.Unlock()
	lw.gathered = false
	lw.writeGathered()
}

func (lw *Writer) writeGathered() error {
	if len(lw.buf) == 0 {
		return nil
	}
	_, err := lw.w.Write(lw.buf)
	lw.buf = lw.buf[:0]
	return err
}
