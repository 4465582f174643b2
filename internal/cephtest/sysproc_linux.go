package cephtest

import "syscall"

// deathSignal makes the kernel kill the child when the thread that
// started it exits (Linux PR_SET_PDEATHSIG).
func deathSignal() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
