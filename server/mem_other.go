//go:build !linux

package server

// physicalMemory is the machine's memory in bytes, 0 if unknown.
func physicalMemory() uint64 { return 0 }

// cgroupMemoryLimit is 0: control groups are Linux's.
func cgroupMemoryLimit() uint64 { return 0 }
