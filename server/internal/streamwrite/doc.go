// Package streamwrite gives a stream handler below connect, which cannot
// reach the http.ResponseWriter, control of its writes: a write deadline
// per send, flushes held back while more messages follow, whole envelopes
// written at once, the end of the request body's reads, and a bound on
// the bytes its connection holds unacknowledged by the client (Unacked).
//
// Guarantees: a send after BeforeSend(timeout, ...) has at least 3/4 of
// timeout before its write deadline; a held flush is skipped, not
// delayed, so the next unheld flush (or WriteFlush) carries everything
// written before it. A nil *Control does nothing. With a bound of max
// bytes (Linux, a connection kept by ConnContext), the connection's send
// buffer is set to max (2×max in the kernel); Unacked.Send writes only
// while the connection holds at most max bytes unacknowledged (SIOCOUTQ:
// sent and not acknowledged, or not yet sent), the Sends of one
// connection's streams one at a time, and answers ErrBehind from the
// first time it holds more: so a write of at most MaxWrite bytes, then a
// last small message, still fit in the buffer without blocking.
//
// Not guaranteed: that a deadline is set at all where the ResponseWriter
// cannot take one (http.ResponseController's ErrNotSupported is ignored),
// nor that a held-back flush is ever made if the handler never sends
// another unheld message. The bound counts bytes the client's kernel
// acknowledged as read: its receive buffer (its own memory) fills before
// the bound counts anything. Bytes held in net/http's or HTTP/2's buffers
// (a held flush, a stream without flow-control window) are not counted:
// a write blocked there is cut only by its deadline. Without a bound
// (other platforms, max 0) Send just writes.
package streamwrite
