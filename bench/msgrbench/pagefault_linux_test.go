package msgrbench

import (
	"syscall"
	"testing"
)

// BenchmarkFreshMapping is what a message buffer costs when the allocator
// hands back fresh memory for every 1 MiB message, as glibc malloc does
// for Ceph's secure-mode frame buffers (a new anonymous mapping, faulted
// in page by page as the cipher writes it, unmapped when freed): "fresh"
// maps 1 MiB, writes one byte per 4 KiB page and unmaps it; "resident"
// writes the same bytes to one mapping kept for the whole run. µs/page
// is the wall time of one minor page fault on this machine (a
// paravirtualized guest traps to its hypervisor on each), cpu-µs/page the
// process's CPU time (user and system) for it, which other load on the
// machine does not inflate.
func BenchmarkFreshMapping(b *testing.B) {
	const n = 1 << 20
	page := syscall.Getpagesize()
	pages := n / page
	b.Run("mode=fresh", func(b *testing.B) {
		b.SetBytes(n)
		cpu0 := processCPU(b)
		for b.Loop() {
			m, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
			if err != nil {
				b.Fatal(err)
			}
			for i := 0; i < n; i += page {
				m[i] = 1
			}
			if err := syscall.Munmap(m); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*pages), "µs/page")
		b.ReportMetric(float64(processCPU(b)-cpu0)/1e3/float64(b.N*pages), "cpu-µs/page")
	})
	b.Run("mode=resident", func(b *testing.B) {
		m, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = syscall.Munmap(m) }()
		b.SetBytes(n)
		cpu0 := processCPU(b)
		for b.Loop() {
			for i := 0; i < n; i += page {
				m[i]++
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*pages), "µs/page")
		b.ReportMetric(float64(processCPU(b)-cpu0)/1e3/float64(b.N*pages), "cpu-µs/page")
	})
}

// processCPU returns the process's user and system CPU time so far, in
// nanoseconds.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
