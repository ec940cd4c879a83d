// Command scalebench measures fenced's write path at scale, with readers and
// subscribers around it; see bench/README.md.
//
//	cd bench && go run ./cmd/scalebench -fenced-bin /path/to/fenced
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
	"strings"
	"syscall"
	"time"

	"github.com/fencedio/fenced/bench"
)

func main() {
	var cfg bench.ScaleConfig
	flag.StringVar(&cfg.FencedBin, "fenced-bin", "", "fenced binary (default: build ../cmd/fenced)")
	flag.IntVar(&cfg.Leases, "leases", 300_000, "live leases created first")
	flag.DurationVar(&cfg.Duration, "duration", 10*time.Second, "measured churn per phase")
	flag.IntVar(&cfg.Clients, "clients", 16, "acquire+release clients")
	flag.IntVar(&cfg.Listers, "listers", 16, "clients looping List")
	flag.IntVar(&cfg.Dashboards, "dashboards", 50, "/v1/events subscribers")
	flag.IntVar(&cfg.Watchers, "watchers", 2_000, "Watch streams")
	phaseList := flag.String("phases", "", "comma-separated phases to run among quiet, readers, watchers (default: all)")
	flag.StringVar(&cfg.ProfileDir, "profile-dir", "", "write CPU profiles of fenced (run with --pprof) and of the harness per phase here")
	fencedArgs := flag.String("fenced-args", "", "space-separated flags added to fenced's command line")
	jsonOut := flag.Bool("json", false, "write the phases as JSON to stdout")
	flag.Parse()
	if *phaseList != "" {
		cfg.Phases = strings.Split(*phaseList, ",")
	}
	cfg.FencedArgs = strings.Fields(*fencedArgs)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := os.MkdirTemp("", "scalebench-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(dir)
	cfg.Dir = dir
	if cfg.FencedBin == "" {
		cfg.FencedBin = filepath.Join(dir, "fenced")
		build := exec.CommandContext(ctx, "go", "build", "-o", cfg.FencedBin, "./cmd/fenced")
		build.Dir, build.Stderr = "..", os.Stderr
		if err := build.Run(); err != nil {
			fail(err)
		}
	}
	logf := func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }
	phases, err := bench.RunScale(ctx, cfg, logf)
	if *jsonOut {
		json.NewEncoder(os.Stdout).Encode(phases)
	} else {
		fmt.Println("| phase | ops/s | vs quiet | acquire p50 / p99 | errors | /healthz not 200 | peak RSS | cores: fenced / harness | readers |")
		fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---|")
		for _, p := range phases {
			ratio := p.OpsPerSec / phases[0].OpsPerSec
			fmt.Printf("| %s | %.0f | %.0f%% | %v / %v | %d | %d | %d MiB | %.2f / %.2f | %s |\n", p.Name, p.OpsPerSec, 100*ratio,
				p.AcquireP50.Round(10*time.Microsecond), p.AcquireP99.Round(10*time.Microsecond), p.Errors, p.Unhealthy, p.PeakRSS>>20,
				p.FencedCPU, p.HarnessCPU, p.Load)
		}
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "scalebench:", err)
	os.Exit(1)
}
