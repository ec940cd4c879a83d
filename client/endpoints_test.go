package client_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/internal/fencedtest"
)

// deadURL returns the URL of a loopback port nothing listens on.
func deadURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// TestEndpointsFailOver checks that calls skip an endpoint that cannot be
// reached and that a lease renews through the endpoint that answers.
func TestEndpointsFailOver(t *testing.T) {
	t.Parallel()
	srv := fencedtest.Start(t)
	c, err := client.New(client.Config{Endpoints: []string{deadURL(t), srv.URL}, TTL: 3 * time.Second, RenewInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, "ep/a")
	if err != nil {
		t.Fatalf("acquire with a dead first endpoint: %v", err)
	}
	info, err := c.Renew(ctx, l.Key(), l.ID())
	if err != nil || info.Token != l.Token() {
		t.Fatalf("renew: %v %v", info, err)
	}
	if got, err := c.Get(ctx, "ep/a"); err != nil || got.Lease == nil || got.LastToken != l.Token() {
		t.Fatalf("get: %+v %v", got, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	// Errors other than unavailable are not retried elsewhere.
	if _, err := c.Renew(ctx, "ep/a", l.ID()); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("renew after release: %v, want ErrNotHeld", err)
	}
}

// TestEndpointsAllDown checks that a call gives up with ErrUnavailable
// after FailoverTimeout when no endpoint answers.
func TestEndpointsAllDown(t *testing.T) {
	t.Parallel()
	c, err := client.New(client.Config{Endpoints: []string{deadURL(t), deadURL(t)}, FailoverTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = c.Get(context.Background(), "k")
	if !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("get with every endpoint down: %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("gave up after %v, FailoverTimeout is 300ms", d)
	}
}

func TestEndpointsConfig(t *testing.T) {
	t.Parallel()
	cfg := client.Config{Endpoints: []string{"127.0.0.1:7420", "http://127.0.0.1:7422/"}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.Endpoints[0] != "127.0.0.1:7420" || cfg.Endpoint != "" {
		t.Errorf("Validate changed the config: %v, Endpoint %q", cfg.Endpoints, cfg.Endpoint)
	}
	dup := client.Config{Endpoints: []string{"http://a:1", "a:1"}}
	if err := dup.Validate(); err == nil {
		t.Error("a duplicate endpoint was accepted")
	}
	if got := client.ParseEndpoints(" a:1, ,b:2,"); len(got) != 2 || got[0] != "a:1" || got[1] != "b:2" {
		t.Errorf("ParseEndpoints: %v", got)
	}
}
