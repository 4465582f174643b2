package main

import (
	"os"
	"strings"
	"testing"

	"github.com/ferrymsg/ferry/bench/plot/plottest"
)

// TestPlotPeersOutput draws a stored bench/peers run and renders it.
func TestPlotPeersOutput(t *testing.T) {
	f, err := os.Open("../../peers/testdata/bulk-s6-bbr.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rs, err := parse(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) < 20 {
		t.Fatalf("%d results parsed", len(rs))
	}
	r := rs[0]
	if r.bench != "BenchmarkBulkPut" || r.params["size"] != "1MiB" || r.params["impl"] != "raw" || r.values["MB/s"] != 3012.84 {
		t.Errorf("first result %+v", r)
	}
	cs := charts(rs, "size", "impl", []string{"MB/s"})
	c := cs["BulkPut-MBpers.svg"]
	if c == nil {
		t.Fatalf("charts %v", keys(cs))
	}
	var names []string
	for _, s := range c.Series {
		names = append(names, s.Name)
		if len(s.X) != 2 || s.X[0] != 1<<20 || s.X[1] != 16<<20 {
			t.Errorf("series %s at sizes %v, want 1 MiB and 16 MiB", s.Name, s.X)
		}
	}
	if strings.Join(names, ",") != "ferry,grpc-unary,raw,raw-chunked" {
		t.Errorf("series %v", names)
	}
	// The median of the three ferry 1 MiB PUT runs (2397.31, 2353.96, 2287.27).
	if got := c.Series[0].Y[0]; got != 2353.96 {
		t.Errorf("ferry 1 MiB median %v, want 2353.96", got)
	}
	var b strings.Builder
	if err := c.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	plottest.RequireRenderer(t)
	if img := plottest.Render(t, []byte(b.String())); img.Dx() < 100 {
		t.Errorf("rendered %v", img)
	}
}

func keys[M ~map[string]V, V any](m M) []string {
	var k []string
	for s := range m {
		k = append(k, s)
	}
	return k
}
