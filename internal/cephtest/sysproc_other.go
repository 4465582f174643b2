//go:build !linux

package cephtest

import "syscall"

// deathSignal returns nil: only Linux can kill a child when its parent dies.
func deathSignal() *syscall.SysProcAttr { return nil }
