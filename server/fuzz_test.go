package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// FuzzUnaryRequests sends arbitrary bodies to every unary method of the
// API, as JSON or protobuf, with and without credentials, through the full
// handler (body limit, authentication, decoding, validation,
// authorization). Whatever arrives, the answer is a well-formed response or
// a client error: never a 5xx other than unavailable, never a panic.
// Seeds: testdata/fuzz/FuzzUnaryRequests.
func FuzzUnaryRequests(f *testing.F) {
	s := newTestServer(f, Config{AuthFile: writePolicy(f, testPolicy()), MaxBodyBytes: 4 << 10})
	h := s.Handler()
	methods := []string{
		"/fenced.v1.LeaseService/Acquire", "/fenced.v1.LeaseService/Renew", "/fenced.v1.LeaseService/Release",
		"/fenced.v1.LeaseService/Get", "/fenced.v1.LeaseService/List", "/fenced.v1.AdminService/Revoke",
	}
	f.Add(uint8(0), false, uint8(1), []byte(`{"key":"a/1","ttlMs":1000}`))
	f.Add(uint8(0), false, uint8(1), []byte(`{"key":"a/1","owner":"x\u0000","ttlMs":"9223372036854775807","waitMs":-1}`))
	f.Add(uint8(1), false, uint8(1), []byte(`{"key":"a/1","leaseId":"00"}`))
	f.Add(uint8(2), false, uint8(2), []byte(`{"key":"a/1","leaseId":"00"}`))
	f.Add(uint8(3), false, uint8(0), []byte(`{"key":"\ud800"}`))
	f.Add(uint8(4), false, uint8(1), []byte(`{"prefix":"a/","limit":-5}`))
	f.Add(uint8(5), false, uint8(2), []byte(`{"key":"a/1"}`))
	f.Add(uint8(3), true, uint8(2), []byte("\x0a\x03a/1"))
	f.Add(uint8(0), true, uint8(1), []byte("\x0a\x03a/1\x18\xe8\x07"))
	f.Fuzz(func(t *testing.T, method uint8, binary bool, who uint8, body []byte) {
		req := httptest.NewRequest(http.MethodPost, methods[int(method)%len(methods)], bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if binary {
			req.Header.Set("Content-Type", "application/proto")
		}
		switch who % 3 {
		case 1:
			req.Header.Set("Authorization", "Bearer "+aliceSecret)
		case 2:
			req.Header.Set("Authorization", "Bearer "+opsSecret)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("%s %q: status %d: %s", req.URL.Path, body, rec.Code, rec.Body)
		}
		if rec.Code != http.StatusOK && !binary {
			var e struct{ Code string }
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Code == "" || e.Code == "internal" || e.Code == "unknown" {
				t.Fatalf("%s %q: status %d, error body %s", req.URL.Path, body, rec.Code, rec.Body)
			}
		}
	})
}
