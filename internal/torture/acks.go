package torture

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/fencedio/fenced/internal/failpoint"
)

// nodeAck is an acknowledgement a node reported from its own side
// (failpoint.AckNotifyEnvVar): the successful answer to an Acquire,
// Release or Renew, written and flushed by node's API.
type nodeAck struct {
	node int    // index in engine.localNodes
	kind string // "acquire", "release" or "renew"
	at   time.Time
}

// ackListener receives the nodes' acknowledgements, one Unix datagram
// socket per node. A kill aimed at an acknowledgement waits on it, so that
// it lands within a millisecond of the answer leaving the node, where
// the worker's own record of the answer comes milliseconds later.
type ackListener struct {
	dir   string
	conns []*net.UnixConn
	acks  chan nodeAck // the latest ones; older ones are dropped
	seen  atomic.Int64 // acknowledgements received
	// renewals counts each node's acknowledged renewals.
	renewals []atomic.Int64
}

// nodeSideAcks reports whether the nodes can report acknowledgements
// themselves: only a build with the failpoints can, which a run with
// mutants or simulated power losses has by requirement.
func (c *Config) nodeSideAcks() bool {
	return c.Endpoint == "" && (len(c.Failpoints) > 0 || c.LoseUnsynced)
}

func newAckListener(nodes int) (*ackListener, error) {
	// A short directory: socket paths are limited to ~100 bytes.
	dir, err := os.MkdirTemp("", "fenced-acks-")
	if err != nil {
		return nil, fmt.Errorf("torture: ack sockets: %w", err)
	}
	a := &ackListener{dir: dir, acks: make(chan nodeAck, 1), renewals: make([]atomic.Int64, nodes)}
	for i := range nodes {
		c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: a.path(i), Net: "unixgram"})
		if err != nil {
			a.close()
			return nil, fmt.Errorf("torture: ack socket: %w", err)
		}
		a.conns = append(a.conns, c)
		go a.read(i, c)
	}
	return a, nil
}

func (a *ackListener) path(node int) string {
	return filepath.Join(a.dir, fmt.Sprintf("n%d.sock", node))
}

// env is node's environment entry that makes it report its acknowledgements.
func (a *ackListener) env(node int) string {
	return failpoint.AckNotifyEnvVar + "=" + a.path(node)
}

func (a *ackListener) read(node int, c *net.UnixConn) {
	buf := make([]byte, 64)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		a.seen.Add(1)
		ack := nodeAck{node: node, kind: string(buf[:n]), at: time.Now()}
		if ack.kind == "renew" {
			a.renewals[node].Add(1)
		}
		select {
		case a.acks <- ack:
		default:
			select { // replace the stale one
			case <-a.acks:
			default:
			}
			select {
			case a.acks <- ack:
			default:
			}
		}
	}
}

// await drops any acknowledgement received before the call and waits up
// to 2s for a fresh one for which want is true.
func (a *ackListener) await(ctx context.Context, want func(nodeAck) bool) (nodeAck, bool) {
	select {
	case <-a.acks:
	default:
	}
	timeout := time.NewTimer(2 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case <-ctx.Done():
			return nodeAck{}, false
		case <-timeout.C:
			return nodeAck{}, false
		case ack := <-a.acks:
			if want(ack) {
				return ack, true
			}
		}
	}
}

func (a *ackListener) close() {
	for _, c := range a.conns {
		c.Close()
	}
	os.RemoveAll(a.dir)
}

// isLogAck reports an acknowledgement of a change written to the raft log.
func isLogAck(a nodeAck) bool { return a.kind == "acquire" || a.kind == "release" }
