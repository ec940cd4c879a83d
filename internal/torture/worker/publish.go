package worker

import (
	"context"
	"errors"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/fence/fencemsg"
	"github.com/fencedio/fenced/internal/torture/history"
)

var errNacked = errors.New("the broker refused the message (negative confirmation)")

// publish sends a message stamped with the lease (its key, token and next
// sequence) to the main queue, or to the delay queue, and resends it with
// the same stamp and ID while its outcome is unknown. The queue has no
// answer path: a stale message is refused at the consumer, not here.
func (w *worker) publish(l *client.Lease, viaDelay bool) writeResult {
	w.writes++
	op := &history.Op{Kind: history.KindPublish, Key: l.Key(), Token: l.Token(), Object: objectName(l.Key(), w.spec.name(), w.writes),
		Via: history.ViaDirect, Sequence: l.NextSequence()}
	q := w.spec.Queue
	if viaDelay {
		op.Via, q = history.ViaDelayed, w.spec.DelayQueue
	}
	stamp := fencemsg.LeaseStamp(fence.WithSequence(context.Background(), op.Sequence), l)
	return w.resend(op, func(op *history.Op) writeResult { return w.publishOnce(l, op, q, stamp) })
}

func (w *worker) publishOnce(l *client.Lease, op *history.Op, q string, stamp fencemsg.Stamp) writeResult {
	op.Deadline = l.Deadline().UnixNano()
	ctx, cancel := context.WithTimeout(context.Background(), w.spec.WriteTimeout)
	defer cancel()
	w.rec.Begin(op)
	dc, err := w.pub.Send(ctx, q, op.Object, stamp, history.ObjectValue(op))
	if err != nil {
		w.rec.End(op, history.Unknown, history.CodeTransport, err)
		return writeUnknown
	}
	if w.loseAnswer(op) {
		w.rec.End(op, history.Unknown, history.CodeAnswerLost, errAnswerLost)
		return writeUnknown
	}
	ok, err := dc.WaitContext(ctx)
	switch {
	case err != nil:
		w.rec.End(op, history.Unknown, history.CodeTimeout, err)
		return writeUnknown
	case !ok:
		w.rec.End(op, history.Fail, history.CodeNacked, errNacked)
		return writeFailed
	}
	w.rec.End(op, history.OK, "", nil)
	return writeOK
}
