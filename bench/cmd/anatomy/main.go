// Command anatomy takes one acquire+release cycle apart: it starts fenced
// with --pprof, loops -clients clients (each its own connection and key),
// and reports the clients' clocks, fenced's histograms and both sides' CPU
// time per cycle, then captures execution traces and CPU profiles of both
// sides into -dir, with anatomy.json, and prints the split, each
// goroutine's time and each side's CPU by part; see bench/README.md
// ("Anatomy of one cycle").
//
//	cd bench && go run ./cmd/anatomy -dir /tmp/anatomy
//	cd bench && go run ./cmd/anatomy -dir /tmp/anatomy-64 -clients 64
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fencedio/fenced/bench"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "anatomy:", err)
		os.Exit(1)
	}
}

func run() error {
	var cfg bench.AnatomyConfig
	flag.StringVar(&cfg.Dir, "dir", "", "directory for fenced's data and log and the captures (required)")
	flag.StringVar(&cfg.FencedBin, "fenced-bin", "", "fenced binary (default: build ../cmd/fenced into -dir)")
	flag.IntVar(&cfg.Clients, "clients", 1, "clients looping at once, each on its own connection and key")
	flag.DurationVar(&cfg.Warmup, "warmup", 2*time.Second, "unmeasured cycles first")
	flag.DurationVar(&cfg.Window, "window", 3*time.Second, "each window: clocks and histograms, traces, CPU profiles (whole seconds)")
	flag.Parse()
	if cfg.Dir == "" || flag.NArg() > 0 {
		flag.Usage()
		return fmt.Errorf("-dir is required")
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cfg.FencedBin == "" {
		cfg.FencedBin = filepath.Join(cfg.Dir, "fenced")
		cmd := exec.CommandContext(ctx, "go", "build", "-o", cfg.FencedBin, "./cmd/fenced")
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build ../cmd/fenced (run from bench/): %w\n%s", err, out)
		}
	}
	a, err := bench.RunAnatomy(ctx, cfg, os.Stderr)
	if err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(cfg.Dir, "anatomy.json"))
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	enc.SetIndent("", "  ")
	if err := enc.Encode(a); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return a.WriteMarkdown(os.Stdout)
}
