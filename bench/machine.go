package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Machine describes where a report was measured.
type Machine struct {
	Cores   int    `json:"cores"`
	Model   string `json:"model"`
	Kernel  string `json:"kernel"`
	LoadAvg string `json:"loadAvg"` // /proc/loadavg when the run started
	// Fsync is the latency of fdatasync after appending 4 KiB to a file in
	// the directory where the servers keep their data, in microseconds:
	// what one commit costs the disk.
	FsyncP50Us float64 `json:"fsyncP50Us"`
	FsyncP99Us float64 `json:"fsyncP99Us"`
	FsyncN     int     `json:"fsyncSamples"`
}

// fsyncSamples is how many appends the fsync probe times.
const fsyncSamples = 500

// describeMachine reads the machine's description and probes fsync in dir.
func describeMachine(dir string) (Machine, error) {
	m := Machine{Cores: runtime.NumCPU(), Model: cpuModel()}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		m.LoadAvg = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	lat, err := probeFsync(dir, fsyncSamples)
	if err != nil {
		return m, err
	}
	m.FsyncN = len(lat)
	m.FsyncP50Us = float64(lat[len(lat)/2].Nanoseconds()) / 1e3
	m.FsyncP99Us = float64(lat[len(lat)*99/100].Nanoseconds()) / 1e3
	return m, nil
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// probeFsync appends 4 KiB to a file in dir and fdatasyncs it n times, as a
// write-ahead log does for one commit, and returns the sorted latencies of
// the syncs.
func probeFsync(dir string, n int) ([]time.Duration, error) {
	f, err := os.CreateTemp(dir, "fsync-probe-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	block := make([]byte, 4096)
	lat := make([]time.Duration, 0, n)
	for range n {
		if _, err := f.Write(block); err != nil {
			return nil, err
		}
		start := time.Now()
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			return nil, fmt.Errorf("fsync probe in %s: %w", filepath.Dir(f.Name()), err)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	return lat, nil
}

func (m Machine) String() string {
	return fmt.Sprintf("%d cores (%s), Linux %s, load average %s at the start; fdatasync of a 4 KiB append: p50 %.0f µs, p99 %.0f µs (%d samples)",
		m.Cores, m.Model, m.Kernel, m.LoadAvg, m.FsyncP50Us, m.FsyncP99Us, m.FsyncN)
}
