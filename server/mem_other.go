//go:build !linux

package server

// physicalMemory is the machine's memory in bytes, 0 if unknown.
func physicalMemory() uint64 { return 0 }
