package server

import "syscall"

// physicalMemory is the machine's memory in bytes, 0 if unknown.
func physicalMemory() uint64 {
	var info syscall.Sysinfo_t
	if syscall.Sysinfo(&info) != nil {
		return 0
	}
	return uint64(info.Totalram) * uint64(info.Unit)
}
