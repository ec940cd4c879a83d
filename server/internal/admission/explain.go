package admission

import (
	"fmt"
	"net/http"
	"strings"
)

// ExplainRefusals gives the answers that connect-go makes before any method
// runs, and sends without a body, a plain-text body that says what to do:
// 415 for a Content-Type the method does not speak, 505 for a
// bidirectional stream over HTTP/1.1. Everything else passes through
// untouched.
func ExplainRefusals(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&refusalWriter{ResponseWriter: w, r: r}, r)
	})
}

type refusalWriter struct {
	http.ResponseWriter
	r       *http.Request
	started bool
}

func (w *refusalWriter) WriteHeader(code int) {
	if w.started {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	w.started = true
	var msg string
	switch code {
	case http.StatusUnsupportedMediaType:
		msg = unsupportedMediaType(w.r)
	case http.StatusHTTPVersionNotSupported:
		instead := "renew with the unary Renew method, which works over HTTP/1.1"
		if method(w.r) == "Session" {
			instead = "use the unary Acquire, Renew and Release methods, which work over HTTP/1.1"
		}
		msg = fmt.Sprintf("fenced: %s is a bidirectional stream and needs HTTP/2, but this request came over %s.\n"+
			"Use HTTP/2 without TLS (h2c: curl --http2-prior-knowledge, or any gRPC client), "+
			"or %s.\n", method(w.r), w.r.Proto, instead)
	}
	if msg == "" {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "text/plain; charset=utf-8")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Del("Content-Length")
	w.ResponseWriter.WriteHeader(code)
	_, _ = w.ResponseWriter.Write([]byte(msg))
}

func (w *refusalWriter) Write(b []byte) (int, error) {
	w.started = true
	return w.ResponseWriter.Write(b)
}

// Flush keeps streaming answers working: connect-go flushes through
// http.Flusher.
func (w *refusalWriter) Flush() {
	w.started = true
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *refusalWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func method(r *http.Request) string {
	return r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
}

func unsupportedMediaType(r *http.Request) string {
	m := method(r)
	var what string
	switch m {
	case "Watch", "KeepAlive", "Session":
		what = fmt.Sprintf("%s is a stream: send Content-Type application/connect+json (or application/connect+proto), "+
			"with every message in a 5-byte envelope (a flags byte, then the length as a big-endian uint32)", m)
	default:
		what = fmt.Sprintf("%s is a unary method: send Content-Type application/json with the request as JSON "+
			"(or application/proto)", m)
	}
	return fmt.Sprintf("fenced: Content-Type %q is not accepted here.\n%s; gRPC and gRPC-Web clients send their own types. "+
		"The Accept-Post header lists every accepted type; the protocol is described in docs/protocol.md of the fenced repository.\n",
		r.Header.Get("Content-Type"), what)
}
