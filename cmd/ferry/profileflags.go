package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
)

// byteFlag is a flag holding a byte count with the suffixes parseBytes
// reads ("1M" is 1048576, "128MiB" 134217728), as an int (sizes) or an
// int64 (budgets, where a negative count has a meaning).
type byteFlag[T int | int64] struct{ p *T }

func newByteFlag[T int | int64](fs *flag.FlagSet, name string, value T, usage string) *T {
	p := new(T)
	*p = value
	fs.Var(byteFlag[T]{p}, name, usage)
	return p
}

// newSizeFlag defines a byte-count flag held in an int.
func newSizeFlag(fs *flag.FlagSet, name string, value int, usage string) *int {
	return newByteFlag(fs, name, value, usage)
}

// newBytesFlag defines a byte-count flag held in an int64.
func newBytesFlag(fs *flag.FlagSet, name string, value int64, usage string) *int64 {
	return newByteFlag(fs, name, value, usage)
}

func (f byteFlag[T]) String() string {
	if f.p == nil {
		return "0"
	}
	return strconv.FormatInt(int64(*f.p), 10)
}

func (f byteFlag[T]) Set(v string) error {
	n, err := parseBytes(v)
	if err != nil || int64(T(n)) != n {
		return fmt.Errorf("want a byte count such as 4096, 64K, 128MiB or 1G")
	}
	*f.p = T(n)
	return nil
}

// profileFlags are a command's --cpuprofile and --trace.
type profileFlags struct {
	cpu, trace *string
}

func addProfileFlags(fs *flag.FlagSet) profileFlags {
	return profileFlags{
		cpu:   fs.String("cpuprofile", "", "write a CPU profile of the run to `FILE` (go tool pprof reads it)"),
		trace: fs.String("trace", "", "write an execution trace of the run to `FILE` (go tool trace reads it)"),
	}
}

// start begins the profiles asked for and returns the function that ends
// them and closes their files.
func (p profileFlags) start() (stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	if *p.cpu != "" {
		f, err := os.Create(*p.cpu)
		if err != nil {
			return stop, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return stop, err
		}
		stops = append(stops, func() { pprof.StopCPUProfile(); f.Close() })
	}
	if *p.trace != "" {
		f, err := os.Create(*p.trace)
		if err != nil {
			return stop, err
		}
		if err := trace.Start(f); err != nil {
			f.Close()
			return stop, err
		}
		stops = append(stops, func() { trace.Stop(); f.Close() })
	}
	return stop, nil
}
