//go:build !unix

package msgr

import "errors"

// rawSockets is false off Unix: connections are written and read through
// net.Conn alone (no SO_RCVLOWAT, no writev on the descriptor).
const rawSockets = false

type iovec struct{}

func makeIovec([]byte) iovec { return iovec{} }

func writevFD(uintptr, []iovec) (int, error) {
	return 0, errors.New("msgr: writev is not available on this platform")
}

func writeFD(uintptr, []byte) (int, error) {
	return 0, errors.New("msgr: raw writes are not available on this platform")
}

func setRcvLowat(uintptr, int) {}

// readableFD is not used off Unix (raw sockets are off there).
func readableFD(uintptr) bool { return true }
