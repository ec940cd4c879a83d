//go:build !unix

package proc

import (
	"os"
	"syscall"
)

// SignalsSupported reports whether processes can be frozen, resumed and
// told to snapshot with signals.
const SignalsSupported = false

var (
	SigStop os.Signal = os.Kill
	SigCont os.Signal = os.Kill
	SigTerm os.Signal = os.Kill
	// SigSnapshot is never sent: runs need signals.
	SigSnapshot os.Signal = os.Interrupt
)

func notifySnapshot(chan<- os.Signal) {}

func sysProcAttr() *syscall.SysProcAttr { return nil }
