//go:build linux

package rpc

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// directAvailable: the system has process_vm_readv and process_vm_writev.
const directAvailable = true

// processVM moves bytes between local and the memory of process pid
// with one process_vm_readv (or, to write the peer's memory,
// process_vm_writev). Both sides hold the same number of bytes and at
// most IOV_MAX pieces.
func processVM(pid int, write bool, local [][]byte, remote []directSeg) (int, error) {
	liov := make([]unix.Iovec, len(local))
	for i, s := range local {
		liov[i].Base = &s[0]
		liov[i].SetLen(len(s))
	}
	riov := make([]unix.RemoteIovec, len(remote))
	for i, s := range remote {
		riov[i] = unix.RemoteIovec{Base: s.addr, Len: s.n}
	}
	var n int
	var err error
	if write {
		n, err = unix.ProcessVMWritev(pid, liov, riov, 0)
	} else {
		n, err = unix.ProcessVMReadv(pid, liov, riov, 0)
	}
	runtime.KeepAlive(local)
	return n, err
}
