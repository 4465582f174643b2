package sim

import (
	"bytes"
	"testing"
)

func TestTracerSumAndCopy(t *testing.T) {
	var w bytes.Buffer
	a, b := newTracer(&w), newTracer(nil)
	for i := range 10000 {
		for _, tr := range []*tracer{a, b} {
			tr.message(recDeliver, int64(i), 1, 2, 0, []byte("ping"))
			tr.member(int64(i), 3, 4, 5, 2)
		}
	}
	if a.sum() != b.sum() {
		t.Fatal("a copy changed the hash")
	}
	if w.Len() != 10000*(17+4+4)+10000*(13+4+8+1) {
		t.Fatalf("copied %d bytes", w.Len())
	}
	c := newTracer(nil)
	c.member(0, 3, 4, 5, 1)
	d := newTracer(nil)
	d.member(0, 3, 4, 5, 2)
	if c.sum() == d.sum() {
		t.Fatal("different traces, one hash")
	}
}

func TestParseHWM(t *testing.T) {
	in := "Name:\tx\nVmPeak:\t  999 kB\nVmHWM:\t   12345 kB\nVmRSS:\t 1 kB\n"
	if got := parseHWM([]byte(in)); got != 12345*1024 {
		t.Fatalf("got %d", got)
	}
	if parseHWM([]byte("VmHWM:\n")) != 0 || parseHWM(nil) != 0 {
		t.Fatal("garbage parsed")
	}
	if PeakRSS() <= 0 {
		t.Fatal("no VmHWM on this system")
	}
}
