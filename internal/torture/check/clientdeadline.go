package check

import (
	"time"

	"github.com/fencedio/fenced/internal/torture/history"
)

// NameClientDeadline names ClientDeadline's result.
const NameClientDeadline = "client-deadline-conservative"

// ClientDeadline checks the workers' client libraries rather than the
// service: at every write, the local deadline the writer held for its lease
// (Op.Deadline) must not pass the TTL after the send time of the last
// acknowledged grant or renewal of that lease that had been answered when
// the write began. A client that counts its deadline from the answer
// instead of the send (the Python worker's mutant) believes itself the
// holder after the server may have handed the key to someone else.
// Writes without a recorded deadline are not checked. A violation is
// timed at the write's call: the moment the writer acted on the deadline.
func ClientDeadline(h *history.History) Result {
	r := Result{Name: NameClientDeadline}
	type leaseOf struct {
		worker int
		key    string
		token  uint64
	}
	type proof struct{ call, ret int64 }
	ids := map[leaseOf]string{}
	ttl := map[string]int64{}
	proofs := map[string][]proof{}
	for _, op := range h.Ops {
		if op.Outcome != history.OK || op.LeaseID == "" {
			continue
		}
		switch op.Kind {
		case history.KindAcquire:
			ids[leaseOf{op.Worker, op.Key, op.Token}] = op.LeaseID
			ttl[op.LeaseID] = op.TTLMs
		case history.KindRenew:
		default:
			continue
		}
		proofs[op.LeaseID] = append(proofs[op.LeaseID], proof{op.Call, op.Return})
	}
	// 1ms covers turning a monotonic deadline into wall-clock time.
	const tolerance = int64(time.Millisecond)
	for _, op := range h.Ops {
		if op.Deadline == 0 || (op.Kind != history.KindPut && op.Kind != history.KindSQL && op.Kind != history.KindRedis) {
			continue
		}
		id, ok := ids[leaseOf{op.Worker, op.Key, op.Token}]
		if !ok {
			continue
		}
		r.Checked++
		var latest int64
		for _, p := range proofs[id] {
			if p.ret <= op.Call {
				latest = max(latest, p.call)
			}
		}
		if latest == 0 {
			continue
		}
		bound := latest + ttl[id]*int64(time.Millisecond)
		if op.Deadline > bound+tolerance {
			r.AddViolationAt(op.Call, "%v: the writer's local deadline was %v after the send of the lease's last acknowledged grant or renewal, beyond the TTL of %v",
				op, time.Duration(op.Deadline-latest), time.Duration(ttl[id])*time.Millisecond)
		}
	}
	return r
}
