//go:build !unix

package torture

import (
	"os"
	"syscall"
)

const signalsSupported = false

var (
	sigStop os.Signal = os.Kill
	sigCont os.Signal = os.Kill
	sigTerm os.Signal = os.Kill
)

func sysProcAttr() *syscall.SysProcAttr { return nil }
