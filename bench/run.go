package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencedio/fenced/client"
)

// Report is the outcome of Run.
type Report struct {
	Seconds float64 `json:"secondsPerRun"`
	Rounds  int     `json:"rounds"`
	Rows    []Row   `json:"rows"`
	// RSS of both servers after all throughput runs, in bytes.
	FencedRSSAfterRuns int64   `json:"fencedRssAfterRuns,omitempty"`
	EtcdRSSAfterRuns   int64   `json:"etcdRssAfterRuns,omitempty"`
	Memory             *Memory `json:"memory,omitempty"`
	// TotalSeconds is the wall time of the whole run, builds included.
	TotalSeconds float64 `json:"totalSeconds"`
}

// Row is one workload at one client count.
type Row struct {
	Workload string `json:"workload"`
	Title    string `json:"title"`
	Clients  int    `json:"clients"`
	Op       string `json:"op"`
	Latency  string `json:"latency"`
	Fenced   Median `json:"fenced"`
	Etcd     Median `json:"etcd"`
	// Ratio is fenced ops/s over etcd ops/s (medians).
	Ratio float64 `json:"ratio"`
}

// Median summarizes the rounds of one system: each figure is the median of
// that figure over the rounds.
type Median struct {
	OpsPerSec float64     `json:"opsPerSec"`
	P50Ms     float64     `json:"p50Ms"`
	P99Ms     float64     `json:"p99Ms"`
	Errors    uint64      `json:"errors"`
	Runs      []RunResult `json:"runs"`
}

// Memory is the result of the memory workload.
type Memory struct {
	Leases        int     `json:"leases"`
	Created       int64   `json:"created"`
	ActiveGauge   int64   `json:"activeGauge"` // fenced_leases_active after creation
	Errors        uint64  `json:"errors"`
	FirstError    string  `json:"firstError,omitempty"`
	CreateSeconds float64 `json:"createSeconds"`
	IdleRSS       int64   `json:"idleRss"`
	RSS           int64   `json:"rss"`
	PeakRSS       int64   `json:"peakRss"`
	BytesPerLease float64 `json:"bytesPerLease"`
}

// Run builds and starts the servers, runs the selected workloads and
// returns the report. Progress lines go to progress. When the memory
// workload fails after the throughput runs, Run returns their report along
// with the error.
func Run(ctx context.Context, cfg Config, progress io.Writer) (*Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.BenchDir == "" && (cfg.FencedBin == "" || cfg.EtcdBin == "") {
		dir, err := findBenchDir()
		if err != nil {
			return nil, fmt.Errorf("bench config: %w", err)
		}
		cfg.BenchDir = dir
	}
	began := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(progress, "[%6.1fs] %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
	}
	tmp, err := os.MkdirTemp("", "fencedbench-")
	if err != nil {
		return nil, err
	}
	if cfg.KeepTemp {
		logf("temporary directory kept: %s", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}

	var throughput []workload
	for _, w := range workloads {
		if cfg.selected(w.name) {
			if cfg.Clients != nil && w.name == "acquire-release" {
				w.clients = cfg.Clients
			}
			throughput = append(throughput, w)
		}
	}
	wantMemory := cfg.selected(memoryWorkload)

	fencedBin, etcdBin := cfg.FencedBin, cfg.EtcdBin
	if fencedBin == "" {
		fencedBin = filepath.Join(tmp, "bin", "fenced")
		logf("building fenced")
		if err := goBuild(ctx, filepath.Dir(cfg.BenchDir), "./cmd/fenced", fencedBin); err != nil {
			return nil, err
		}
	}
	if etcdBin == "" && len(throughput) > 0 {
		etcdBin = filepath.Join(tmp, "bin", "etcdnode")
		logf("building etcdnode")
		if err := goBuild(ctx, cfg.BenchDir, "./cmd/etcdnode", etcdBin); err != nil {
			return nil, err
		}
	}

	rep := &Report{Seconds: cfg.Duration.Seconds(), Rounds: cfg.Rounds}
	maxLeases := max(2_000_000, 2*cfg.Leases)
	if len(throughput) > 0 {
		if err := runThroughput(ctx, cfg, throughput, tmp, fencedBin, etcdBin, maxLeases, rep, logf); err != nil {
			return nil, err
		}
	}
	if wantMemory {
		m, err := runMemory(ctx, cfg.Leases, filepath.Join(tmp, "memory"), fencedBin, maxLeases, logf)
		if err != nil {
			rep.TotalSeconds = time.Since(began).Seconds()
			return rep, err
		}
		rep.Memory = m
	}
	rep.TotalSeconds = time.Since(began).Seconds()
	return rep, nil
}

func runThroughput(ctx context.Context, cfg Config, ws []workload, tmp, fencedBin, etcdBin string, maxLeases int, rep *Report, logf func(string, ...any)) error {
	fdir, edir := filepath.Join(tmp, "fenced"), filepath.Join(tmp, "etcd")
	for _, d := range []string{fdir, edir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	logf("starting fenced and etcd")
	fsrv, err := startFenced(ctx, fencedBin, fdir, maxLeases)
	if err != nil {
		return err
	}
	defer fsrv.stop(10 * time.Second)
	esrv, err := startEtcd(ctx, etcdBin, edir)
	if err != nil {
		return err
	}
	defer esrv.stop(10 * time.Second)
	logf("fenced pid %d at %s; etcd pid %d at %s", fsrv.pid(), fsrv.endpoint, esrv.pid(), esrv.endpoint)
	systems := []struct {
		sys system
		srv *server
	}{{fencedSystem{fsrv.endpoint}, fsrv}, {etcdSystem{esrv.endpoint}, esrv}}

	type cell struct{ runs [2][]RunResult }
	type rowKey struct {
		w int
		n int
	}
	var order []rowKey
	for wi, w := range ws {
		for _, n := range w.clients {
			order = append(order, rowKey{wi, n})
		}
	}
	cells := make(map[rowKey]*cell)
	for _, k := range order {
		cells[k] = &cell{}
	}
	// Rounds outermost, so that drift over the run (data growing, caches,
	// the machine's other load) spreads over both systems and all rows.
	for round := 1; round <= cfg.Rounds; round++ {
		for _, k := range order {
			w := ws[k.w]
			for si, s := range systems {
				if s.srv.exited() {
					return fmt.Errorf("%s exited: %v\n%s", s.sys.name(), s.srv.waitErr, s.srv.logTail())
				}
				res, err := runOnce(ctx, s.sys, w, k.n, cfg.Duration)
				if err != nil {
					return fmt.Errorf("round %d, %s, %d clients: %w", round, w.name, k.n, err)
				}
				res.Round = round
				cells[k].runs[si] = append(cells[k].runs[si], res)
				msg := fmt.Sprintf("round %d/%d  %-16s %3d clients  %-6s %9.0f ops/s  p50 %s  p99 %s",
					round, cfg.Rounds, w.name, k.n, s.sys.name(), res.OpsPerSec, fmtMs(res.P50Ms), fmtMs(res.P99Ms))
				if res.Errors > 0 {
					msg += fmt.Sprintf("  %d errors, first: %s", res.Errors, res.FirstError)
				}
				logf("%s", msg)
			}
		}
	}
	for _, k := range order {
		w := ws[k.w]
		row := Row{Workload: w.name, Title: w.title, Clients: k.n, Op: w.op, Latency: w.latency,
			Fenced: median(cells[k].runs[0]), Etcd: median(cells[k].runs[1])}
		if row.Etcd.OpsPerSec > 0 {
			row.Ratio = row.Fenced.OpsPerSec / row.Etcd.OpsPerSec
		}
		rep.Rows = append(rep.Rows, row)
	}
	if rss, _, err := fsrv.rss(); err == nil {
		rep.FencedRSSAfterRuns = rss
	}
	if rss, _, err := esrv.rss(); err == nil {
		rep.EtcdRSSAfterRuns = rss
	}
	return nil
}

func median(runs []RunResult) Median {
	m := Median{Runs: runs}
	pick := func(f func(RunResult) float64) float64 {
		v := make([]float64, len(runs))
		for i, r := range runs {
			v[i] = f(r)
		}
		slices.Sort(v)
		if len(v) == 0 {
			return 0
		}
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	m.OpsPerSec = pick(func(r RunResult) float64 { return r.OpsPerSec })
	m.P50Ms = pick(func(r RunResult) float64 { return r.P50Ms })
	m.P99Ms = pick(func(r RunResult) float64 { return r.P99Ms })
	for _, r := range runs {
		m.Errors += r.Errors
	}
	return m
}

// Memory workload: a fresh fenced process, n live leases, then its RSS.
const (
	memConns      = 16 // client objects, each with its own connection
	memPerConn    = 64 // concurrent acquisitions on each
	memLeaseTTL   = time.Hour
	memSettleTime = 2 * time.Second
)

func runMemory(ctx context.Context, n int, dir, fencedBin string, maxLeases int, logf func(string, ...any)) (*Memory, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	logf("memory: starting a fresh fenced")
	srv, err := startFenced(ctx, fencedBin, dir, maxLeases)
	if err != nil {
		return nil, err
	}
	defer srv.stop(30 * time.Second)
	m := &Memory{Leases: n}
	if m.IdleRSS, _, err = srv.rss(); err != nil {
		return nil, err
	}
	logf("memory: fenced pid %d idle RSS %s; creating %d leases with TTL %v", srv.pid(), fmtBytes(m.IdleRSS), n, memLeaseTTL)

	// Stop at once if the server dies, rather than fail every remaining
	// acquisition.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-srv.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	start := time.Now()
	created, dialErr := createLeases(ctx, fencedSystem{srv.endpoint}, n, m, logf)
	if srv.exited() {
		return nil, fmt.Errorf("memory: fenced exited after %d leases (%v); its log ends:\n%s", created, srv.waitErr, srv.logTail())
	}
	if dialErr != nil {
		return nil, fmt.Errorf("memory: dial: %w", dialErr)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.CreateSeconds = time.Since(start).Seconds()
	m.Created = created
	if err := measureMemory(ctx, srv, m, logf); err != nil {
		return nil, err
	}
	if m.Created == 0 {
		return nil, errors.New("memory: no lease was created: " + m.FirstError)
	}
	return m, nil
}

// createLeases creates leases 0..n-1 over memConns connections, memPerConn
// at a time on each, logging progress, and records failed acquisitions in
// m. It returns how many were created and why a connection could not be
// made, if one could not.
func createLeases(ctx context.Context, sys fencedSystem, n int, m *Memory, logf func(string, ...any)) (int64, error) {
	var (
		next, created atomic.Int64
		errs          atomic.Uint64
		errOnce       sync.Once
		wg            sync.WaitGroup
	)
	start := time.Now()
	stopProgress := make(chan struct{})
	go func() {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-t.C:
				c := created.Load()
				logf("memory: %d/%d leases (%.0f/s)", c, n, float64(c)/time.Since(start).Seconds())
			}
		}
	}()
	defer close(stopProgress)
	var dialErr error
	for range memConns {
		c, err := sys.dial(ctx)
		if err != nil {
			dialErr = err
			break
		}
		fc := c.(*fencedConn)
		defer fc.close()
		for range memPerConn {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < int64(n) && ctx.Err() == nil; i = next.Add(1) - 1 {
					l, err := fc.c.Acquire(ctx, fmt.Sprintf("fencedbench/memory/%08d", i), client.WithTTL(memLeaseTTL))
					if err != nil {
						errs.Add(1)
						errOnce.Do(func() { m.FirstError = err.Error() })
						continue
					}
					// Stop renewing locally without releasing: the lease
					// stays live on the server for its TTL, and the harness
					// does not keep a million renewal timers.
					l.Orphan()
					created.Add(1)
				}
			})
		}
	}
	wg.Wait()
	m.Errors = errs.Load()
	return created.Load(), dialErr
}

// measureMemory lets the server settle, then reads its RSS and lease gauge
// into m.
func measureMemory(ctx context.Context, srv *server, m *Memory, logf func(string, ...any)) error {
	// Give the server a moment to finish what the last requests started
	// (snapshots, GC) before reading its RSS.
	select {
	case <-time.After(memSettleTime):
	case <-ctx.Done():
		return ctx.Err()
	}
	var err error
	if m.ActiveGauge, err = fencedLeasesActive(ctx, srv.endpoint); err != nil {
		logf("memory: cannot read fenced_leases_active: %v", err)
	}
	if m.RSS, m.PeakRSS, err = srv.rss(); err != nil {
		return err
	}
	if m.Created > 0 {
		m.BytesPerLease = float64(m.RSS-m.IdleRSS) / float64(m.Created)
	}
	logf("memory: %d leases in %.1fs (%.0f/s), %d errors; fenced RSS %s (peak %s), %.0f bytes/lease over idle",
		m.Created, m.CreateSeconds, float64(m.Created)/m.CreateSeconds, m.Errors, fmtBytes(m.RSS), fmtBytes(m.PeakRSS), m.BytesPerLease)
	if m.Errors > 0 {
		logf("memory: first error: %s", m.FirstError)
	}
	return nil
}
