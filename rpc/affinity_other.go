//go:build !linux

package rpc

import "errors"

// setAffinity is only supported on Linux.
func setAffinity(cpus []int) error {
	return errors.New("CPU pinning is only supported on Linux")
}
