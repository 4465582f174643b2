package sim

import (
	"bytes"
	"os"
	"strconv"
)

// PeakRSS returns the process's peak resident set size in bytes (VmHWM in
// /proc/self/status), or 0 where that file is not available.
func PeakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	return parseHWM(b)
}

// parseHWM finds the VmHWM line ("VmHWM:\t  123456 kB") in a
// /proc/PID/status and returns it in bytes, or 0.
func parseHWM(b []byte) int64 {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		v, ok := bytes.CutPrefix(line, []byte("VmHWM:"))
		if !ok {
			continue
		}
		f := bytes.Fields(v)
		if len(f) < 1 {
			return 0
		}
		n, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			return 0
		}
		if len(f) > 1 && string(f[1]) == "kB" {
			n *= 1024
		}
		return n
	}
	return 0
}
