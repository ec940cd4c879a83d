package streamwrite

import (
	"syscall"
	"unsafe"
)

const canTell = true

// sendQueue is the bytes in the socket's send queue: sent and not
// acknowledged, or not yet sent (SIOCOUTQ, which is TIOCOUTQ's number).
func sendQueue(fd uintptr) int {
	var n int32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCOUTQ, uintptr(unsafe.Pointer(&n))); errno != 0 {
		return 0
	}
	return int(n)
}
