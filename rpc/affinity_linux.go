package rpc

import (
	"fmt"
	"syscall"
	"unsafe"
)

// maxCPUs bounds the CPU numbers a context can be pinned to.
const maxCPUs = 1024

// setAffinity pins the calling OS thread to cpus (sched_setaffinity on
// thread 0, the caller). The caller has locked its goroutine to the
// thread.
func setAffinity(cpus []int) error {
	var mask [maxCPUs / 64]uint64
	for _, c := range cpus {
		if c < 0 || c >= maxCPUs {
			return fmt.Errorf("CPU %d out of range", c)
		}
		mask[c/64] |= 1 << (c % 64)
	}
	_, _, e := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, 0, uintptr(len(mask)*8), uintptr(unsafe.Pointer(&mask[0])))
	if e != 0 {
		return e
	}
	return nil
}
