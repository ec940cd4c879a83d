package noreplay_test

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	"github.com/fencedio/fenced/internal/noreplay"
)

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestTransportDropsGetBody(t *testing.T) {
	req, err := http.NewRequest("POST", "http://127.0.0.1/", bytes.NewReader([]byte("body")))
	if err != nil {
		t.Fatal(err)
	}
	if req.GetBody == nil {
		t.Fatal("http.NewRequest gave a bytes.Reader body no GetBody")
	}
	var sent *http.Request
	next := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent = r
		return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
	})
	if _, err := (noreplay.Transport{Next: next}).RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	if sent.GetBody != nil {
		t.Error("the request handed on still has a GetBody")
	}
	if req.GetBody == nil {
		t.Error("RoundTrip changed the caller's request")
	}
	if b, _ := io.ReadAll(sent.Body); string(b) != "body" {
		t.Errorf("body handed on = %q, want %q", b, "body")
	}
}
