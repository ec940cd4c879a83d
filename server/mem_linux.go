package server

import (
	"bufio"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"
)

// physicalMemory is the machine's memory in bytes, 0 if unknown.
func physicalMemory() uint64 {
	var info syscall.Sysinfo_t
	if syscall.Sysinfo(&info) != nil {
		return 0
	}
	return uint64(info.Totalram) * uint64(info.Unit)
}

// cgroupMemoryLimit is the lowest memory limit of this process's control
// group and its ancestors (cgroup v2 memory.max, v1
// memory.limit_in_bytes), 0 if none is set or none can be read. A
// container's own group often shows as the root: its limit is read there.
func cgroupMemoryLimit() uint64 {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return 0
	}
	defer f.Close()
	var lowest uint64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-ID:controllers:path; v2 is 0::path.
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		var dir, file string
		switch {
		case parts[0] == "0" && parts[1] == "":
			dir, file = "/sys/fs/cgroup", "memory.max"
		case strings.Contains(","+parts[1]+",", ",memory,"):
			dir, file = "/sys/fs/cgroup/memory", "memory.limit_in_bytes"
		default:
			continue
		}
		for p := path.Clean(parts[2]); ; p = path.Dir(p) {
			b, err := os.ReadFile(path.Join(dir, p, file))
			if n, perr := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && perr == nil && n > 0 && (lowest == 0 || n < lowest) {
				lowest = n // "max" (v2) and v1's near-2^63 "unlimited" do not parse or exceed the machine
			}
			if p == "/" || p == "." {
				break
			}
		}
	}
	return lowest
}
