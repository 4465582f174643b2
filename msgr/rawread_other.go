//go:build !linux

package msgr

import (
	"io"
	"net"
)

// rawSyscalls: sockets are read and written through package syscall
// here (see rawread_linux.go).
const rawSyscalls = false

// socketSource returns what the reader of nc reads from: nc itself here.
func socketSource(nc net.Conn) io.Reader { return nc }
