//go:build !linux

package msgr

import (
	"io"
	"net"
	"time"
)

// rawSyscalls: sockets are read and written through package syscall
// here (see rawread_linux.go).
const rawSyscalls = false

// raw reports whether a socket call may be a raw system call: never here.
func raw() bool { return false }

// socketSource returns what the reader of nc reads from: nc itself here.
func socketSource(nc net.Conn) io.Reader { return nc }

// setBusyPoll does nothing here: sockets are not polled (Config.BusyPoll).
func setBusyPoll(io.Reader, time.Duration, *msgrMetrics) {}
