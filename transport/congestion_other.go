//go:build !linux

package transport

import (
	"fmt"
	"syscall"
)

func setCongestion(syscall.RawConn, string) error {
	return fmt.Errorf("%w: choosing the tcp congestion control on this system", ErrUnsupported)
}

// Congestion returns the TCP congestion control of c; only Linux
// supports it, elsewhere the error matches ErrUnsupported.
func Congestion(Conn) (string, error) {
	return "", fmt.Errorf("%w: tcp congestion control on this system", ErrUnsupported)
}
