// Package noreplay keeps net/http's HTTP/2 client from sending a request
// body a second time on its own.
//
// When a server sends GOAWAY (a node shutting down gracefully) as a
// request starts, the HTTP/2 transport retries the request with a body
// from its GetBody, and hands it back to http.Transport's own retry loop
// when no connection is left. If the caller's context ends at the same
// moment, the first attempt's body writer may still be reading the body
// while http.Transport checks whether it was read: a data race inside the
// standard library (the race detector reports
// net/http.(*readTrackingBody).Read against rewindBody). A request without
// GetBody is never replayed that way.
//
// The cost is the transparent retry itself: a request that meets a GOAWAY
// fails with an error, which fenced's clients treat as any other transport
// error (the call may have arrived; calls that may go again do).
package noreplay

import "net/http"

// Transport hands each request to Next without its GetBody.
type Transport struct{ Next http.RoundTripper }

// RoundTrip implements http.RoundTripper.
func (t Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.GetBody == nil {
		return t.Next.RoundTrip(r)
	}
	r2 := r.WithContext(r.Context()) // a shallow copy: RoundTrip must not change r
	r2.GetBody = nil
	return t.Next.RoundTrip(r2)
}
