package bench

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// AnatomyConfig configures Anatomy: clients looping acquire+release, each
// on its own connection and key, against one fenced node started with
// --pprof.
type AnatomyConfig struct {
	FencedBin string        // fenced binary (required)
	Dir       string        // data, logs and the captures (required)
	Clients   int           // clients at once; default 1
	Warmup    time.Duration // unmeasured cycles first; default 2s
	Window    time.Duration // each capture window; default 3s
}

// Anatomy is where one acquire+release cycle spends its time, from the
// clients' clocks, fenced's histograms and CPU times. The captures in Dir
// are runtime/trace and CPU profiles of both sides, taken in windows of
// their own: trace.server, trace.client (window 2), cpu.server.pprof,
// cpu.client.pprof (window 3).
type Anatomy struct {
	Clients       int     `json:"clients"`
	Cycles        int64   `json:"cycles"`       // in the measured window (1), all clients
	CyclesPerSec  float64 `json:"cyclesPerSec"` // all clients
	CycleUs       float64 `json:"cycleUs"`      // mean time of one cycle, client side (Acquire + Release)
	AcquireUs     float64 `json:"acquireUs"`    // mean Acquire call, client side
	ReleaseUs     float64 `json:"releaseUs"`    // mean Release call, client side
	HandlerAcqUs  float64 `json:"handlerAcqUs"` // fenced_request_duration_seconds, Acquire
	HandlerRelUs  float64 `json:"handlerRelUs"` // … Release
	ApplyUs       float64 `json:"applyUs"`      // fenced_raft_apply_duration_seconds: submit to applied
	LogWriteUs    float64 `json:"logWriteUs"`   // fenced_raft_log_write_duration_seconds: append+fsync
	LogWrites     float64 `json:"logWritesPerCycle"`
	Applies       float64 `json:"appliesPerCycle"`
	ServerCPUUs   float64 `json:"serverCpuUs"` // per cycle, /proc/PID/stat
	ClientCPUUs   float64 `json:"clientCpuUs"` // per cycle, getrusage of this process
	TraceCycles   int64   `json:"traceCycles"` // cycles in the trace window (2)
	ProfileCycles int64   `json:"profileCycles"`
	// Server and Client are the goroutines' time per cycle in the trace
	// window, by kind.
	Server []GoroutineTime `json:"server"`
	Client []GoroutineTime `json:"client"`
	// ServerCPU and ClientCPU split each side's CPU time per cycle by
	// what it was spent on, from the CPU profiles (window 3).
	ServerCPU []CPUPart `json:"serverCpu"`
	ClientCPU []CPUPart `json:"clientCpu"`
}

// RunAnatomy starts fenced, runs the three windows and writes the captures.
func RunAnatomy(ctx context.Context, cfg AnatomyConfig, progress io.Writer) (*Anatomy, error) {
	if cfg.Warmup == 0 {
		cfg.Warmup = 2 * time.Second
	}
	if cfg.Window == 0 {
		cfg.Window = 3 * time.Second
	}
	cfg.Clients = max(cfg.Clients, 1)
	srv, err := startFenced(ctx, cfg.FencedBin, cfg.Dir, 1_000_000, nil, "--pprof")
	if err != nil {
		return nil, err
	}
	defer srv.stop(10 * time.Second)
	r := &anatomyRun{ctx: ctx, cfg: cfg, srv: srv}
	sys := &fencedSystem{label: "fenced", endpoints: []string{srv.endpoint}}
	for range cfg.Clients {
		c, err := sys.dial(ctx)
		if err != nil {
			return nil, err
		}
		defer c.close()
		r.cs = append(r.cs, c)
	}
	fmt.Fprintf(progress, "fenced pid %d; %d client(s); warm-up %v\n", srv.pid(), cfg.Clients, cfg.Warmup)
	if _, err := r.loop(cfg.Warmup); err != nil {
		return nil, err
	}
	a := &Anatomy{Clients: cfg.Clients}
	if err := r.measure(a); err != nil {
		return nil, err
	}
	fmt.Fprintf(progress, "tracing %v\n", cfg.Window)
	if err := r.trace(a); err != nil {
		return nil, err
	}
	fmt.Fprintf(progress, "profiling %v\n", cfg.Window)
	if err := r.profile(a); err != nil {
		return nil, err
	}
	if a.ServerCPU, err = CPUParts(ctx, filepath.Join(cfg.Dir, "cpu.server.pprof"), a.ProfileCycles); err != nil {
		return nil, err
	}
	if a.ClientCPU, err = CPUParts(ctx, filepath.Join(cfg.Dir, "cpu.client.pprof"), a.ProfileCycles); err != nil {
		return nil, err
	}
	return a, nil
}

// anatomyRun is the clients' acquire+release loops against one fenced
// node, and the time their calls took.
type anatomyRun struct {
	ctx      context.Context
	cfg      AnatomyConfig
	srv      *server
	cs       []conn        // one per client
	acq, rel time.Duration // the Acquire and Release calls' time, summed over the clients
}

// loop runs every client's cycles for d, each on its own key, and returns
// how many cycles they ran in all.
func (r *anatomyRun) loop(d time.Duration) (int64, error) {
	type sums struct {
		n        int64
		acq, rel time.Duration
		err      error
	}
	out := make([]sums, len(r.cs))
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for i, c := range r.cs {
		wg.Go(func() {
			key, s := fmt.Sprintf("fencedbench/anatomy/%d", i), &out[i]
			for ; time.Now().Before(end); s.n++ {
				t0 := time.Now()
				h, err := c.lock(r.ctx, key, false)
				if err != nil {
					s.err = err
					return
				}
				t1 := time.Now()
				if err := h.release(r.ctx); err != nil {
					s.err = err
					return
				}
				s.acq += t1.Sub(t0)
				s.rel += time.Since(t1)
			}
		})
	}
	wg.Wait()
	var n int64
	var errs []error
	for _, s := range out {
		n += s.n
		r.acq += s.acq
		r.rel += s.rel
		errs = append(errs, s.err)
	}
	return n, errors.Join(errs...)
}

// measure is window 1: the client's clock, fenced's histograms, and both
// sides' CPU time, per cycle.
func (r *anatomyRun) measure(a *Anatomy) error {
	m0, err := scrape(r.ctx, r.srv.endpoint)
	if err != nil {
		return err
	}
	cpu0, err := procCPU(r.srv.pid())
	if err != nil {
		return err
	}
	self0 := selfCPU()
	r.acq, r.rel = 0, 0
	start := time.Now()
	if a.Cycles, err = r.loop(r.cfg.Window); err != nil {
		return err
	}
	wall := time.Since(start)
	self1 := selfCPU()
	cpu1, err := procCPU(r.srv.pid())
	if err != nil {
		return err
	}
	m1, err := scrape(r.ctx, r.srv.endpoint)
	if err != nil {
		return err
	}
	n := float64(a.Cycles)
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / n }
	a.CyclesPerSec = n / wall.Seconds()
	a.AcquireUs, a.ReleaseUs = us(r.acq), us(r.rel)
	a.CycleUs = a.AcquireUs + a.ReleaseUs
	a.ServerCPUUs, a.ClientCPUUs = us(cpu1-cpu0), us(self1-self0)
	mean := func(name, labels string) (float64, float64) {
		dn := m1[name+"_count"+labels] - m0[name+"_count"+labels]
		ds := m1[name+"_sum"+labels] - m0[name+"_sum"+labels]
		if dn == 0 {
			return 0, 0
		}
		return ds / dn * 1e6, dn / n
	}
	a.HandlerAcqUs, _ = mean("fenced_request_duration_seconds", `{method="Acquire"}`)
	a.HandlerRelUs, _ = mean("fenced_request_duration_seconds", `{method="Release"}`)
	a.ApplyUs, a.Applies = mean("fenced_raft_apply_duration_seconds", "")
	a.LogWriteUs, a.LogWrites = mean("fenced_raft_log_write_duration_seconds", "")
	return nil
}

// trace is window 2: execution traces of both sides at once, and the
// goroutines' time per cycle in them.
func (r *anatomyRun) trace(a *Anatomy) error {
	serverTrace := capture(r.ctx, fmt.Sprintf("%s/debug/pprof/trace?seconds=%d", r.srv.endpoint, int(r.cfg.Window.Seconds())), filepath.Join(r.cfg.Dir, "trace.server"))
	f, err := os.Create(filepath.Join(r.cfg.Dir, "trace.client"))
	if err != nil {
		return err
	}
	if err := trace.Start(f); err != nil {
		return err
	}
	a.TraceCycles, err = r.loop(r.cfg.Window)
	trace.Stop()
	f.Close()
	if err != nil {
		return err
	}
	if err := <-serverTrace; err != nil {
		return err
	}
	if a.Server, err = GoroutineTimes(r.ctx, filepath.Join(r.cfg.Dir, "trace.server"), a.TraceCycles); err != nil {
		return err
	}
	a.Client, err = GoroutineTimes(r.ctx, filepath.Join(r.cfg.Dir, "trace.client"), a.TraceCycles)
	return err
}

// profile is window 3: CPU profiles of both sides at once.
func (r *anatomyRun) profile(a *Anatomy) error {
	serverProf := capture(r.ctx, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", r.srv.endpoint, int(r.cfg.Window.Seconds())), filepath.Join(r.cfg.Dir, "cpu.server.pprof"))
	f, err := os.Create(filepath.Join(r.cfg.Dir, "cpu.client.pprof"))
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		return err
	}
	a.ProfileCycles, err = r.loop(r.cfg.Window)
	pprof.StopCPUProfile()
	f.Close()
	if err != nil {
		return err
	}
	return <-serverProf
}

// capture fetches url into path in the background; the channel gets its
// outcome.
func capture(ctx context.Context, url, path string) <-chan error {
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- err
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(path)
		if err != nil {
			done <- err
			return
		}
		_, err = io.Copy(f, resp.Body)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		done <- err
	}()
	return done
}

// scrape reads every sample of fenced's /metrics, keyed by name and labels
// as written there.
func scrape(ctx context.Context, endpoint string) (map[string]float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out, sc.Err()
}

// GoroutineTime is the time one kind of goroutine spent in each state
// during a trace window, per cycle, in microseconds: running on a thread,
// runnable (ready, waiting for a thread: a hand-off's wake-up delay), and
// in a system call (fsync, socket reads and writes).
type GoroutineTime struct {
	Kind      string  `json:"kind"`
	RunningUs float64 `json:"runningUs"`
	RunnableU float64 `json:"runnableUs"`
	SyscallUs float64 `json:"syscallUs"`
}

// goroutineKinds names goroutines by a frame of their stacks, first match
// wins.
var goroutineKinds = []struct{ frame, kind string }{
	{"raft.(*Raft).runFSM", "raft FSM (applies entries)"},
	{"raft.(*Raft).run", "raft leader loop (log write, fsync)"},
	{"fanout.(*Hub).Run", "watch hub dispatcher"},
	{"(*expirer).run", "lease expirer"},
	{"api.(*session).run", "Session call (handler, raft submit, its answer's send)"},
	{"api.(*session).read", "Session reader (connect-go, starts each call)"},
	{"(*Server).await.func", "raft future waiter"},
	{"backgroundRead", "net/http background read"},
	{"http2serverConn).readFrames", "net/http HTTP/2 frame reader"},
	{"http2serverConn).writeFrameAsync", "net/http HTTP/2 frame writer"},
	{"http2serverConn).runHandler", "net/http HTTP/2 handler (Session stream)"},
	{"http2serverConn).serve", "net/http HTTP/2 connection loop"},
	{"net/http.(*conn).serve", "net/http conn (connect-go, handler)"},
	{"net/http.(*persistConn).readLoop", "client: net/http readLoop"},
	{"net/http.(*persistConn).writeLoop", "client: net/http writeLoop"},
	{"http2clientConnReadLoop", "client: HTTP/2 read loop"},
	{"http2clientStream).doRequest", "client: HTTP/2 request writer"},
	{"(*sessionStream).run", "client: Session stream reader"},
	{"(*anatomyRun).loop", "client: caller (fenced client, connect-go)"},
}

// GoroutineTimes reads an execution trace (through `go tool trace
// -d=parsed`) and sums each kind of goroutine's time in each state,
// divided by cycles. Goroutines of no known kind are summed as "other"
// (the runtime's GC workers, timers, the trace reader itself).
func GoroutineTimes(ctx context.Context, traceFile string, cycles int64) ([]GoroutineTime, error) {
	cmd := exec.CommandContext(ctx, "go", "tool", "trace", "-d=parsed", traceFile)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	spent, kind, err := parseTrace(out)
	if werr := cmd.Wait(); werr != nil {
		return nil, fmt.Errorf("go tool trace -d=parsed %s: %w", traceFile, werr)
	}
	if err != nil {
		return nil, err
	}
	return sumByKind(spent, kind, cycles), nil
}

// goState is a goroutine (its ID) in a state.
type goState struct{ g, state string }

// parseTrace reads the output of `go tool trace -d=parsed`: the time each
// goroutine spent in each state, in trace nanoseconds, and the kind of
// each goroutine whose stack shows one of goroutineKinds' frames.
func parseTrace(r io.Reader) (spent map[goState]int64, kind map[string]string, err error) {
	spent, kind = map[goState]int64{}, map[string]string{}
	var (
		since           = map[string]int64{}
		stackOf         string // goroutine whose stack the lines below are
		header, changed string
	)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "M="):
			stackOf = ""
			f := strings.Fields(line)
			if len(f) > 2 {
				header = strings.TrimPrefix(f[2], "G=")
			}
			i := strings.Index(line, " StateTransition Time=")
			if i < 0 {
				continue
			}
			rest := strings.Fields(line[i+len(" StateTransition Time="):])
			if len(rest) < 3 || !strings.HasPrefix(rest[1], "GoID=") {
				continue
			}
			t, _ := strconv.ParseInt(rest[0], 10, 64)
			g := strings.TrimPrefix(rest[1], "GoID=")
			from, _, ok := strings.Cut(rest[2], "->")
			if !ok {
				continue
			}
			if _, seen := since[g]; seen {
				spent[goState{g, from}] += t - since[g]
			}
			since[g], changed = t, g
		case line == "TransitionStack=":
			stackOf = changed
		case line == "Stack=":
			stackOf = header
		case stackOf != "" && kind[stackOf] == "":
			for _, k := range goroutineKinds {
				if strings.Contains(line, k.frame) {
					kind[stackOf] = k.kind
					break
				}
			}
		}
	}
	return spent, kind, sc.Err()
}

// sumByKind sums spent by kind of goroutine ("other" for no known kind), in
// microseconds per cycle, busiest first.
func sumByKind(spent map[goState]int64, kind map[string]string, cycles int64) []GoroutineTime {
	byKind := map[string]*GoroutineTime{}
	var order []*GoroutineTime
	per := func(ns int64) float64 { return float64(ns) / 1e3 / float64(cycles) }
	for k, ns := range spent {
		name := kind[k.g]
		if name == "" {
			name = "other"
		}
		gt := byKind[name]
		if gt == nil {
			gt = &GoroutineTime{Kind: name}
			byKind[name] = gt
			order = append(order, gt)
		}
		switch k.state {
		case "Running":
			gt.RunningUs += per(ns)
		case "Runnable":
			gt.RunnableU += per(ns)
		case "Syscall":
			gt.SyscallUs += per(ns)
		}
	}
	slices.SortFunc(order, func(a, b *GoroutineTime) int { return cmp.Compare(b.RunningUs, a.RunningUs) })
	res := make([]GoroutineTime, len(order))
	for i, gt := range order {
		res[i] = *gt
	}
	return res
}

// CPUPart is the CPU time one part of the work took, in microseconds per
// cycle, and its share of its side's profile.
type CPUPart struct {
	Part    string  `json:"part"`
	Us      float64 `json:"us"`
	Percent float64 `json:"percent"`
}

// cpuPartRule names a part of the work by frames (substrings of function
// names). An anywhere rule takes a sample with such a frame anywhere in
// its stack; the other rules take a sample by its innermost frame that
// any of them names, so that a sample counts where the code that spent it
// belongs (an allocation to its caller, a socket write to the socket).
type cpuPartRule struct {
	part     string
	frames   []string
	anywhere bool
}

// cpuPartRules are tried in order: the anywhere rules first, then the
// innermost named frame.
var cpuPartRules = []cpuPartRule{
	{"fsync of the raft log", []string{"syscall.Fsync", "syscall.Fdatasync"}, true},
	{"garbage collection", []string{"runtime.gcBgMarkWorker", "runtime.gcAssistAlloc", "runtime.bgsweep", "runtime.bgscavenge"}, true},
	{"Go scheduler: parking, finding work, waking threads", []string{"runtime.mcall", "runtime.wakep", "runtime.schedule", "runtime.findRunnable", "runtime.startm", "runtime.stopm", "runtime.sysmon"}, true},
	{"state machine (applies entries, transition records, watch events)", []string{"fenced/server/internal/fsm."}, true},
	{"raft log append (raft-wal encoding and write)", []string{"hashicorp/raft-wal"}, false},
	{"socket reads and writes (system calls)", []string{"net.(*netFD)."}, false},
	{"raft: leader loop, hand-offs, futures", []string{"hashicorp/raft."}, false},
	{"HTTP/2 and HTTP/1.1 (net/http)", []string{"net/http."}, false},
	{"connect-go and protobuf", []string{"connectrpc.com/", "google.golang.org/protobuf/"}, false},
	{"bench harness (the clients' loop)", []string{"fenced/bench."}, false},
	{"fenced: server's Session stream, handlers, admission, metrics; the client library", []string{"github.com/fencedio/fenced/"}, false},
}

// CPUParts splits a CPU profile (through `go tool pprof -traces`) by
// cpuPartRules, in microseconds per cycle, largest first; samples no rule
// takes are "other (runtime, timers, system calls outside these)".
func CPUParts(ctx context.Context, profile string, cycles int64) ([]CPUPart, error) {
	out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-traces", profile).Output()
	if err != nil {
		return nil, fmt.Errorf("go tool pprof -traces %s: %w", profile, err)
	}
	return splitCPU(string(out), cycles)
}

// splitCPU is CPUParts of the output of `go tool pprof -traces`: samples
// separated by lines of dashes, each a value (a duration) and its first
// frame, then a frame a line, innermost first.
func splitCPU(traces string, cycles int64) ([]CPUPart, error) {
	byPart := map[string]time.Duration{}
	var total time.Duration
	var value time.Duration
	var stack []string
	flush := func() {
		if len(stack) > 0 {
			byPart[cpuPartOf(stack)] += value
			total += value
		}
		stack = stack[:0]
	}
	for line := range strings.Lines(traces) {
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "-----------+"):
			flush()
		case strings.HasPrefix(line, "     ") && strings.TrimSpace(line) != "":
			f := strings.Fields(line)
			if len(stack) == 0 && len(f) >= 2 {
				d, err := time.ParseDuration(f[0])
				if err != nil {
					return nil, fmt.Errorf("pprof -traces: sample value %q: %w", f[0], err)
				}
				value, f = d, f[1:]
			}
			stack = append(stack, f[0])
		}
	}
	flush()
	if total == 0 || cycles == 0 {
		return nil, fmt.Errorf("pprof -traces: no samples, or no cycles")
	}
	parts := make([]CPUPart, 0, len(byPart))
	for p, d := range byPart {
		parts = append(parts, CPUPart{Part: p, Us: float64(d.Nanoseconds()) / 1e3 / float64(cycles), Percent: 100 * float64(d) / float64(total)})
	}
	slices.SortFunc(parts, func(a, b CPUPart) int { return cmp.Compare(b.Us, a.Us) })
	return parts, nil
}

// cpuPartOf names the part of the work a sample's stack (innermost frame
// first) belongs to.
func cpuPartOf(stack []string) string {
	named := func(frame string, r cpuPartRule) bool {
		return slices.ContainsFunc(r.frames, func(f string) bool { return strings.Contains(frame, f) })
	}
	for _, r := range cpuPartRules {
		if r.anywhere && slices.ContainsFunc(stack, func(frame string) bool { return named(frame, r) }) {
			return r.part
		}
	}
	for _, frame := range stack {
		for _, r := range cpuPartRules {
			if !r.anywhere && named(frame, r) {
				return r.part
			}
		}
	}
	return "other (runtime, timers, system calls outside these)"
}

// WriteMarkdown writes the cycle's split, the goroutines' times and the
// CPU by part.
func (a *Anatomy) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	handler := a.HandlerAcqUs + a.HandlerRelUs
	perEntry := a.Applies
	fmt.Fprintf(&b, "%d client(s), %d cycles, %.0f cycles/s: %.0f µs a cycle (Acquire %.0f, Release %.0f, client clock); CPU per cycle: server %.0f µs, client %.0f µs.\n\n",
		a.Clients, a.Cycles, a.CyclesPerSec, a.CycleUs, a.AcquireUs, a.ReleaseUs, a.ServerCPUUs, a.ClientCPUUs)
	b.WriteString("| part of one cycle | µs | from |\n|---|---:|---|\n")
	fmt.Fprintf(&b, "| raft log writes (append + fsync), %.1f per cycle | %.0f | fenced_raft_log_write_duration_seconds |\n", a.LogWrites, a.LogWriteUs*a.LogWrites)
	fmt.Fprintf(&b, "| raft hand-offs and the state machine (submit to applied, less the log write) | %.0f | fenced_raft_apply_duration_seconds − the above |\n", (a.ApplyUs-a.LogWriteUs)*perEntry)
	fmt.Fprintf(&b, "| handler outside raft (connect interceptors on, routing, lease checks) | %.0f | fenced_request_duration_seconds − apply |\n", handler-a.ApplyUs*perEntry)
	fmt.Fprintf(&b, "| outside the handler: client, connect-go and net/http on both sides, loopback | %.0f | cycle − fenced_request_duration_seconds |\n", a.CycleUs-handler)
	for _, side := range []struct {
		name string
		gs   []GoroutineTime
	}{{"server", a.Server}, {"client", a.Client}} {
		fmt.Fprintf(&b, "\n%s goroutines, µs per cycle (trace of %d cycles):\n\n| goroutine | running | runnable | in a system call |\n|---|---:|---:|---:|\n", side.name, a.TraceCycles)
		for _, g := range side.gs {
			fmt.Fprintf(&b, "| %s | %.1f | %.1f | %.1f |\n", g.Kind, g.RunningUs, g.RunnableU, g.SyscallUs)
		}
	}
	for _, side := range []struct {
		name  string
		parts []CPUPart
	}{{"server", a.ServerCPU}, {"client", a.ClientCPU}} {
		var sum float64
		fmt.Fprintf(&b, "\n%s CPU by part, µs per cycle (profile of %d cycles):\n\n| part | µs | share |\n|---|---:|---:|\n", side.name, a.ProfileCycles)
		for _, p := range side.parts {
			fmt.Fprintf(&b, "| %s | %.1f | %.0f%% |\n", p.Part, p.Us, p.Percent)
			sum += p.Us
		}
		fmt.Fprintf(&b, "| all | %.1f | |\n", sum)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
