// Package streamwrite gives a stream handler below connect, which cannot
// reach the http.ResponseWriter, control of its writes: a write deadline
// per send, flushes held back while more messages follow, whole envelopes
// written at once, and the end of the request body's reads.
//
// Guarantees: a send after BeforeSend(timeout, ...) has at least 3/4 of
// timeout before its write deadline; a held flush is skipped, not
// delayed, so the next unheld flush (or WriteFlush) carries everything
// written before it. A nil *Control does nothing.
//
// Not guaranteed: that a deadline is set at all where the ResponseWriter
// cannot take one (http.ResponseController's ErrNotSupported is ignored),
// nor that a held-back flush is ever made if the handler never sends
// another unheld message.
package streamwrite
