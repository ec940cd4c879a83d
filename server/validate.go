package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/fence"
	"github.com/fencedio/fenced/server/internal/apierr"
)

// Input limits of the wire contract.
const (
	MaxKeyBytes   = fence.MaxScopeBytes
	MaxOwnerBytes = fence.MaxOwnerBytes
	maxIDBytes    = 64
)

// validateKey applies fence.ValidateScope: a key is the scope its tokens
// fence, so the service and every guard share one rule, and the service
// never issues a token that a guard would refuse for its scope.
func validateKey(key string) error {
	err := fence.ValidateScope(key)
	if err == nil {
		return nil // before errors.As, whose target would escape: no allocation for a valid key
	}
	var se *fence.ScopeError
	if errors.As(err, &se) {
		return apierr.Invalidf("key %s", se.Reason)
	}
	return nil
}

// validateAcquire checks an acquisition's arguments against the wire
// contract and the configuration; the messages name the wire's fields.
func (s *Server) validateAcquire(key, owner string, ttl, wait time.Duration) error {
	if err := validateKey(key); err != nil {
		return err
	}
	if err := validateOwner(owner); err != nil {
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

// acquireTimes converts the TTL and wait of an Acquire request from
// milliseconds, refusing what no time.Duration can hold.
func acquireTimes(req *fencedv1.AcquireRequest) (ttl, wait time.Duration, err error) {
	const maxMs = math.MaxInt64 / int64(time.Millisecond)
	for _, f := range []struct {
		name string
		ms   int64
		d    *time.Duration
	}{{"ttlMs", req.GetTtlMs(), &ttl}, {"waitMs", req.GetWaitMs(), &wait}} {
		if f.ms > maxMs || f.ms < -maxMs {
			return 0, 0, apierr.Invalidf("%s %d is outside every allowed range", f.name, f.ms)
		}
		*f.d = time.Duration(f.ms) * time.Millisecond
	}
	return ttl, wait, nil
}

// validatePrefix checks the prefix of a List or Watch: empty (every key),
// or a valid key.
func validatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if err := validateKey(prefix); err != nil {
		return fmt.Errorf("prefix: %w", err)
	}
	return nil
}

func validateOwner(owner string) error {
	if len(owner) > MaxOwnerBytes {
		return apierr.Invalidf("owner is %d bytes, the limit is %d", len(owner), MaxOwnerBytes)
	}
	return validateText("owner", owner)
}

func validateID(id string) error {
	if id == "" {
		return apierr.Invalidf("leaseId is required")
	}
	if len(id) > maxIDBytes {
		return apierr.Invalidf("leaseId is %d bytes, the limit is %d", len(id), maxIDBytes)
	}
	return validateText("leaseId", id)
}

// validateText accepts printable UTF-8: no control characters, no NUL.
func validateText(field, s string) error {
	if !utf8.ValidString(s) {
		return apierr.Invalidf("%s is not valid UTF-8", field)
	}
	for i, r := range s {
		if !unicode.IsGraphic(r) {
			return apierr.Invalidf("%s has a non-printable character %U at byte %d", field, r, i)
		}
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
