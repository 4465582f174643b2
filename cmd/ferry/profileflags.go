package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
)

// sizeValue is a flag holding a byte count written in decimal with an
// optional K or M (binary) suffix: "1M" is 1048576.
type sizeValue int

func newSizeFlag(fs *flag.FlagSet, name string, value int, usage string) *int {
	p := new(int)
	*p = value
	fs.Var((*sizeValue)(p), name, usage)
	return p
}

func (s *sizeValue) String() string {
	if s == nil {
		return "0"
	}
	return strconv.Itoa(int(*s))
}

func (s *sizeValue) Set(v string) error {
	n, err := parseInts(v, true)
	if err != nil || len(n) != 1 {
		return fmt.Errorf("want a byte count such as 4096, 64K or 1M")
	}
	*s = sizeValue(n[0])
	return nil
}

// bytesValue is a flag holding a byte count that may be negative, with
// the suffixes parseBytes reads: "128MiB" is 134217728.
type bytesValue int64

func newBytesFlag(fs *flag.FlagSet, name string, value int64, usage string) *int64 {
	p := new(int64)
	*p = value
	fs.Var((*bytesValue)(p), name, usage)
	return p
}

func (b *bytesValue) String() string {
	if b == nil {
		return "0"
	}
	return strconv.FormatInt(int64(*b), 10)
}

func (b *bytesValue) Set(v string) error {
	n, err := parseBytes(v)
	if err != nil {
		return err
	}
	*b = bytesValue(n)
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
