package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	fencedv1 "github.com/fencedio/fenced/api/fenced/v1"
	"github.com/fencedio/fenced/client"
	"google.golang.org/protobuf/proto"
)

// ScaleConfig configures RunScale: fenced at scale, with readers and
// subscribers around the write path.
type ScaleConfig struct {
	FencedBin  string        // fenced binary to run (required)
	Dir        string        // temporary directory for its data (required)
	Leases     int           // live leases created first; default 300,000
	Duration   time.Duration // measured churn per phase; default 10s
	Clients    int           // acquire+release clients; default 16
	Listers    int           // clients looping List(prefix "", limit 100); default 16
	Dashboards int           // /v1/events subscribers; default 50
	Watchers   int           // Watch streams on prefix ""; default 2,000
	// Phases names the phases to run among "quiet", "readers" and
	// "watchers"; empty runs all three.
	Phases []string
	// ProfileDir, when set, receives a CPU profile of fenced (run with
	// --pprof) and one of the harness for each phase.
	ProfileDir string
	// FencedArgs are added to fenced's command line, e.g. to compare
	// settings of one build.
	FencedArgs []string
}

// ScalePhase is the churn measured in one phase.
type ScalePhase struct {
	Name       string        `json:"name"`
	OpsPerSec  float64       `json:"opsPerSec"` // acquire+release cycles
	AcquireP50 time.Duration `json:"acquireP50"`
	AcquireP99 time.Duration `json:"acquireP99"`
	Errors     uint64        `json:"errors"`
	Unhealthy  int           `json:"unhealthySamples"` // /healthz answers other than 200, sampled every 500ms
	Load       string        `json:"load"`             // what the readers achieved
	PeakRSS    int64         `json:"peakRss"`
	// FencedCPU and HarnessCPU are the cores each process kept busy during
	// the phase (CPU time over wall time): the two share the machine.
	FencedCPU  float64 `json:"fencedCpu"`
	HarnessCPU float64 `json:"harnessCpu"`
}

func (c *ScaleConfig) defaults() {
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	def(&c.Leases, 300_000)
	def(&c.Clients, 16)
	def(&c.Listers, 16)
	def(&c.Dashboards, 50)
	def(&c.Watchers, 2_000)
	if c.Duration == 0 {
		c.Duration = 10 * time.Second
	}
}

// RunScale starts fenced, creates cfg.Leases live leases, and measures
// acquire+release churn three times: quiet, with Listers and Dashboards
// reading, and with Watchers streaming every transition.
func RunScale(ctx context.Context, cfg ScaleConfig, logf func(string, ...any)) ([]ScalePhase, error) {
	cfg.defaults()
	extra := slices.Clone(cfg.FencedArgs)
	if cfg.ProfileDir != "" {
		extra = append(extra, "--pprof")
	}
	srv, err := startFenced(ctx, cfg.FencedBin, cfg.Dir, 4_000_000, nil, extra...)
	if err != nil {
		return nil, err
	}
	defer srv.stop(10 * time.Second)
	if err := fillLeases(ctx, srv.endpoint, cfg.Leases, logf); err != nil {
		return nil, err
	}
	var phases []ScalePhase
	measure := func(name string, load func(ctx context.Context) func() string) error {
		lctx, cancel := context.WithCancel(ctx)
		report := func() string { return "" }
		if load != nil {
			report = load(lctx)
		}
		stopProfiles := profilePhase(ctx, cfg, srv, len(phases))
		cpu0, self0, t0 := procCPUOrZero(srv.pid()), selfCPU(), time.Now()
		p, err := churn(ctx, srv, cfg.Clients, cfg.Duration)
		wall := time.Since(t0).Seconds()
		p.FencedCPU = (procCPUOrZero(srv.pid()) - cpu0).Seconds() / wall
		p.HarnessCPU = (selfCPU() - self0).Seconds() / wall
		stopProfiles()
		p.Name, p.Load = name, report()
		cancel()
		if _, peak, rerr := srv.rss(); rerr == nil {
			p.PeakRSS = peak
		}
		logf("scale: %s: %.0f ops/s, acquire p50 %v p99 %v, %d errors, %d unhealthy, cores busy: fenced %.2f harness %.2f; %s",
			name, p.OpsPerSec, p.AcquireP50, p.AcquireP99, p.Errors, p.Unhealthy, p.FencedCPU, p.HarnessCPU, p.Load)
		phases = append(phases, p)
		time.Sleep(time.Second) // let the load's streams close
		return err
	}
	run := func(phase string) bool { return len(cfg.Phases) == 0 || slices.Contains(cfg.Phases, phase) }
	if run("quiet") {
		if err := measure("quiet", nil); err != nil {
			return phases, err
		}
	}
	if run("readers") {
		if err := measure(fmt.Sprintf("%d listers + %d dashboards", cfg.Listers, cfg.Dashboards), func(ctx context.Context) func() string {
			return readers(ctx, srv.endpoint, cfg.Listers, cfg.Dashboards)
		}); err != nil {
			return phases, err
		}
	}
	if run("watchers") {
		if err := measure(fmt.Sprintf("%d watchers", cfg.Watchers), func(ctx context.Context) func() string {
			return watchers(ctx, srv.endpoint, cfg.Watchers)
		}); err != nil {
			return phases, err
		}
	}
	return phases, nil
}

func procCPUOrZero(pid int) time.Duration {
	d, _ := procCPU(pid)
	return d
}

// profilePhase starts CPU profiles of fenced and of the harness for phase
// i when cfg.ProfileDir is set; the returned func stops and writes them.
func profilePhase(ctx context.Context, cfg ScaleConfig, srv *server, i int) func() {
	if cfg.ProfileDir == "" {
		return func() {}
	}
	base := filepath.Join(cfg.ProfileDir, fmt.Sprintf("phase%d-", i+1))
	self, err := os.Create(base + "harness.pprof")
	if err == nil && pprof.StartCPUProfile(self) != nil {
		self.Close()
		self = nil
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		secs := max(1, int(cfg.Duration.Seconds())-1)
		req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", srv.endpoint, secs), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		if f, err := os.Create(base + "fenced.pprof"); err == nil {
			io.Copy(f, resp.Body)
			f.Close()
		}
	})
	return func() {
		if self != nil {
			pprof.StopCPUProfile()
			self.Close()
		}
		wg.Wait()
	}
}

// fillLeases creates n leases with a 1h TTL that the harness does not renew,
// from 16 owners so that no per-owner quota is reached.
func fillLeases(ctx context.Context, endpoint string, n int, logf func(string, ...any)) error {
	var next, created atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	start := time.Now()
	for g := range 16 {
		c, err := client.New(client.Config{Endpoint: endpoint})
		if err != nil {
			return err
		}
		defer c.CloseIdleConnections()
		for range 32 {
			wg.Go(func() {
				for ctx.Err() == nil {
					i := next.Add(1) - 1
					if i >= int64(n) {
						return
					}
					l, err := c.Acquire(ctx, fmt.Sprintf("scale/fill/%08d", i), client.WithTTL(time.Hour), client.WithOwner(fmt.Sprintf("fill-%d", g)))
					if err != nil {
						firstErr.CompareAndSwap(nil, err)
						return
					}
					l.Orphan()
					created.Add(1)
				}
			})
		}
	}
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		return fmt.Errorf("creating leases: %w", err)
	}
	logf("scale: %d leases created in %v", created.Load(), time.Since(start).Round(time.Second))
	return ctx.Err()
}

// churn runs clients acquire+release loops for d and samples /healthz.
func churn(ctx context.Context, srv *server, clients int, d time.Duration) (ScalePhase, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var (
		mu     sync.Mutex
		lat    []time.Duration
		ops    atomic.Int64
		errs   atomic.Uint64
		unwell atomic.Int64
		wg     sync.WaitGroup
	)
	wg.Go(func() {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				hctx, hcancel := context.WithTimeout(ctx, 2*time.Second)
				req, _ := http.NewRequestWithContext(hctx, "GET", srv.endpoint+"/healthz", nil)
				resp, err := http.DefaultClient.Do(req)
				if err == nil {
					if resp.StatusCode != 200 {
						unwell.Add(1)
					}
					resp.Body.Close()
				} else if ctx.Err() == nil {
					unwell.Add(1)
				}
				hcancel()
			}
		}
	})
	start := time.Now()
	for i := range clients {
		c, err := client.New(client.Config{Endpoint: srv.endpoint})
		if err != nil {
			return ScalePhase{}, err
		}
		defer c.CloseIdleConnections()
		wg.Go(func() {
			var mine []time.Duration
			defer func() { mu.Lock(); lat = append(lat, mine...); mu.Unlock() }()
			key := fmt.Sprintf("scale/churn/%d", i)
			for ctx.Err() == nil {
				t0 := time.Now()
				l, err := c.Acquire(context.WithoutCancel(ctx), key, client.WithTTL(10*time.Second), client.WithOwner("churn"))
				if err != nil {
					errs.Add(1)
					continue
				}
				mine = append(mine, time.Since(t0))
				if err := l.Release(context.WithoutCancel(ctx)); err != nil {
					errs.Add(1)
					continue
				}
				ops.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(lat)
	p := ScalePhase{OpsPerSec: float64(ops.Load()) / elapsed.Seconds(), Errors: errs.Load(), Unhealthy: int(unwell.Load())}
	if len(lat) > 0 {
		p.AcquireP50 = lat[len(lat)/2]
		p.AcquireP99 = lat[min(len(lat)-1, len(lat)*99/100)]
	}
	return p, nil
}

// readers starts listers looping List and dashboards reading /v1/events.
func readers(ctx context.Context, endpoint string, listers, dashboards int) func() string {
	var lists, listErrs, sseBytes, sseErrs atomic.Int64
	for range listers {
		c, _ := client.New(client.Config{Endpoint: endpoint})
		go func() {
			defer c.CloseIdleConnections()
			for ctx.Err() == nil {
				if _, err := c.List(ctx, "", 100); err != nil {
					if ctx.Err() == nil {
						listErrs.Add(1)
					}
					continue
				}
				lists.Add(1)
			}
		}()
	}
	for i := range dashboards {
		hc := fromLoopback(i%4+1, false)
		go func() {
			req, _ := http.NewRequestWithContext(ctx, "GET", endpoint+"/v1/events", nil)
			resp, err := hc.Do(req)
			if err != nil || resp.StatusCode != 200 {
				sseErrs.Add(1)
				if err == nil {
					resp.Body.Close()
				}
				return
			}
			defer resp.Body.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := resp.Body.Read(buf)
				sseBytes.Add(int64(n))
				if err != nil {
					return
				}
			}
		}()
	}
	start := time.Now()
	return func() string {
		s := time.Since(start).Seconds()
		return fmt.Sprintf("%.0f lists/s (%d errors), dashboards refused %d, %.1f MiB of events read",
			float64(lists.Load())/s, listErrs.Load(), sseErrs.Load(), float64(sseBytes.Load())/(1<<20))
	}
}

// watchers opens n Watch streams on prefix "", spread over four loopback
// addresses (a server may limit watchers per client address). Each stream
// is read by watchStream, which decodes every event.
func watchers(ctx context.Context, endpoint string, n int) func() string {
	var events, resyncs, failed, open atomic.Int64
	const perClient = 100
	for i := 0; i < n; i += perClient {
		hc := fromLoopback(i/perClient%4+1, true)
		for range min(perClient, n-i) {
			go func() {
				open.Add(1)
				err := watchStream(ctx, hc, endpoint, &events, &resyncs)
				if err != nil && ctx.Err() == nil {
					failed.Add(1)
				}
			}()
		}
	}
	start := time.Now()
	return func() string {
		return fmt.Sprintf("%d watchers, %.0f events/s delivered, %d resyncs, %d streams failed",
			open.Load(), float64(events.Load())/time.Since(start).Seconds(), resyncs.Load(), failed.Load())
	}
}

// watchStream is a Watch client of prefix "" over Connect with binary
// protobuf, as client.Watch is, but lighter on the harness's CPU, which
// the phase shares with fenced: it reads envelopes into one buffer and
// decodes each into one reused message. It still decodes every event,
// counts it (RESYNC apart), and fails on a revision that goes back.
//
// A RESYNC (the server shed this watcher, under overload or because it
// read too slowly) is counted and the stream read on: the server goes on
// with the events after it, as a new Watch from then would, and this
// watcher keeps no state to re-read.
func watchStream(ctx context.Context, hc *http.Client, endpoint string, events, resyncs *atomic.Int64) error {
	body, _ := proto.Marshal(&fencedv1.WatchRequest{})
	env := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(body)))
	req, _ := http.NewRequestWithContext(ctx, "POST", endpoint+"/fenced.v1.LeaseService/Watch", bytes.NewReader(append(env, body...)))
	req.Header.Set("Content-Type", "application/connect+proto")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("watch: %s", resp.Status)
	}
	r := bufio.NewReaderSize(resp.Body, 64<<10)
	var (
		head [5]byte
		buf  []byte
		msg  fencedv1.WatchResponse
		last uint64
	)
	for {
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return err
		}
		buf = slices.Grow(buf[:0], int(binary.BigEndian.Uint32(head[1:])))[:binary.BigEndian.Uint32(head[1:])]
		if _, err := io.ReadFull(r, buf); err != nil {
			return err
		}
		if head[0]&2 != 0 {
			return fmt.Errorf("watch ended: %s", buf)
		}
		if err := proto.Unmarshal(buf, &msg); err != nil {
			return err
		}
		ev := msg.GetEvent()
		if ev.GetType() == fencedv1.Event_RESYNC {
			resyncs.Add(1)
			continue
		}
		if ev.GetRevision() < last {
			return fmt.Errorf("watch: revision %d after %d", ev.GetRevision(), last)
		}
		last = ev.GetRevision()
		events.Add(1)
	}
}

// fromLoopback is an HTTP client whose connections come from 127.0.0.ip.
func fromLoopback(ip int, h2 bool) *http.Client {
	p := new(http.Protocols)
	if h2 {
		p.SetUnencryptedHTTP2(true)
	} else {
		p.SetHTTP1(true)
	}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(ip))}}
	return &http.Client{Transport: &http.Transport{Protocols: p, DialContext: d.DialContext, MaxIdleConnsPerHost: 100}}
}
