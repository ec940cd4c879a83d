package server

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/fencedio/fenced/server/internal/api"
	"github.com/fencedio/fenced/server/internal/apierr"
)

// validateAcquire checks an acquisition's arguments against the wire
// contract and the configuration; the messages name the wire's fields.
func (s *Server) validateAcquire(key, owner string, ttl, wait time.Duration) error {
	if err := api.ValidateKey(key); err != nil {
		return err
	}
	if err := api.ValidateOwner(owner); err != nil {
		return err
	}
	switch {
	case ttl <= 0:
		return apierr.Invalidf("ttlMs is required and must be positive, got %d", ttl.Milliseconds())
	case ttl < s.cfg.MinTTL || ttl > s.cfg.MaxTTL:
		return apierr.Invalidf("ttlMs %d is outside the allowed range %d..%d", ttl.Milliseconds(),
			s.cfg.MinTTL.Milliseconds(), s.cfg.MaxTTL.Milliseconds())
	}
	if wait < 0 || wait > s.cfg.MaxWait {
		return apierr.Invalidf("waitMs %d is outside the allowed range 0..%d", wait.Milliseconds(), s.cfg.MaxWait.Milliseconds())
	}
	return nil
}

// limitBody refuses unary request bodies above max with invalid_argument
// before any of it reaches a handler. Bodies of unknown length are read up
// to the limit first. Streams (gRPC, and Connect's application/connect+...)
// are left to connect's per-message read limit, which answers
// resource_exhausted as gRPC clients expect.
func limitBody(next http.Handler, max int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ct := r.Header.Get("Content-Type")
		if strings.HasPrefix(ct, "application/grpc") || strings.HasPrefix(ct, "application/connect+") {
			next.ServeHTTP(w, r)
			return
		}
		size := r.ContentLength
		if size < 0 && r.Body != nil {
			body, err := io.ReadAll(io.LimitReader(r.Body, max+1))
			if err != nil {
				http.Error(w, "reading request body: "+err.Error(), http.StatusBadRequest)
				return
			}
			size = int64(len(body))
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = size
		}
		if size > max {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"code":"invalid_argument","message":"request body exceeds the limit of %d bytes"}`, max)
			return
		}
		next.ServeHTTP(w, r)
	})
}
