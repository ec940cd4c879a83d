// Package fencedtest starts in-process fenced servers for tests and
// examples.
package fencedtest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/fencedio/fenced/client"
	"github.com/fencedio/fenced/server"
)

// TB is the part of testing.TB that Start needs; examples can pass a
// stand-in that panics.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
	TempDir() string
}

// Server is a running in-process fenced node.
type Server struct {
	*server.Server
	// URL is the base URL of the lease API, e.g. http://127.0.0.1:40123
	// (https with Config.TLS).
	URL     string
	DataDir string
	cfg     server.Config
}

// Config returns a server configuration for tests: loopback ports chosen by
// the system, a fresh data directory, fast elections, TTLs from 100ms, and
// logs discarded. Change it and pass it to StartConfig.
func Config(t TB) server.Config {
	return server.Config{
		DataDir:          t.TempDir(),
		Listen:           "127.0.0.1:0",
		RaftListen:       "127.0.0.1:0",
		MinTTL:           100 * time.Millisecond,
		HeartbeatTimeout: 100 * time.Millisecond,
		Logger:           slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// Start starts a server with Config(t) and stops it when the test ends.
func Start(t TB) *Server {
	t.Helper()
	return StartConfig(t, Config(t))
}

// StartConfig starts a server with cfg, waits until it serves acquisitions
// and stops it when the test ends.
func StartConfig(t TB, cfg server.Config) *Server {
	t.Helper()
	s, err := start(cfg)
	if err != nil {
		t.Fatalf("start fenced: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func start(cfg server.Config) (*Server, error) {
	srv, err := server.New(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		srv.Close()
		return nil, err
	}
	go srv.ServeListener(context.Background(), ln)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.WaitReady(ctx); err != nil {
		srv.Close()
		return nil, err
	}
	scheme := "http://"
	if cfg.TLS.Enabled() {
		scheme = "https://"
	}
	return &Server{Server: srv, URL: scheme + ln.Addr().String(), DataDir: cfg.DataDir, cfg: cfg}, nil
}

// Restart closes the server and starts a new one on the same data
// directory and API address.
func (s *Server) Restart(t TB) *Server {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("close fenced: %v", err)
	}
	cfg := s.cfg
	cfg.Listen = s.URL[strings.Index(s.URL, "://")+3:]
	n, err := start(cfg)
	if err != nil {
		t.Fatalf("restart fenced: %v", err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// Client returns a client of s with the given config (Endpoint filled in).
func (s *Server) Client(t TB, cfg client.Config) *client.Client {
	t.Helper()
	cfg.Endpoint = s.URL
	c, err := client.New(cfg)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	return c
}

// ExampleTB lets runnable examples call Start: failures panic, and the
// functions given to Cleanup run when Close is called, last first.
type ExampleTB struct {
	cleanups []func()
	dirs     []string
}

func (*ExampleTB) Helper() {}

func (*ExampleTB) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

func (e *ExampleTB) Cleanup(f func()) { e.cleanups = append(e.cleanups, f) }

func (e *ExampleTB) TempDir() string {
	d, err := os.MkdirTemp("", "fenced-example-")
	if err != nil {
		panic(err)
	}
	e.dirs = append(e.dirs, d)
	return d
}

// Close runs the cleanups, last first, and removes temporary directories.
func (e *ExampleTB) Close() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
	for _, d := range e.dirs {
		os.RemoveAll(d)
	}
}
