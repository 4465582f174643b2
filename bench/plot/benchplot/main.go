// Command benchplot draws Go benchmark results as the same SVG charts
// ferry bench writes (package bench/plot), so that runs of the benchmark
// harnesses (bench/peers against gRPC-Go, bench/msgrbench,
// bench/transports) are plotted by the same code:
//
//	go test -run '^$' -bench Bulk -count 5 . | tee out.txt
//	go run github.com/ferrymsg/ferry/bench/plot/benchplot -out plots < out.txt
//
// Sub-benchmark names are read as KEY=VALUE parts
// (BenchmarkBulkGet/size=1MiB/impl=ferry-2): each benchmark gets one chart
// per metric (--metrics, units as the output prints them: MB/s, ns/op,
// allocs/op...), with --x's values on the horizontal axis (sizes such as
// 64B, 4KiB, 1MiB are read as bytes) and a line per value of --series;
// repeated runs (-count) are summarised by their median.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/ferrymsg/ferry/bench/plot"
)

// result is one benchmark line.
type result struct {
	bench  string            // BenchmarkBulkGet
	params map[string]string // size=1MiB, impl=ferry
	values map[string]float64
}

// parse reads `go test -bench` output.
func parse(r io.Reader) ([]result, error) {
	var out []result
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue // not a result line
		}
		name := f[0]
		if i := strings.LastIndex(name, "-"); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i] // the GOMAXPROCS suffix
			}
		}
		parts := strings.Split(name, "/")
		res := result{bench: parts[0], params: map[string]string{}, values: map[string]float64{}}
		for _, p := range parts[1:] {
			if k, v, ok := strings.Cut(p, "="); ok {
				res.params[k] = v
			} else {
				res.bench += "/" + p
			}
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			res.values[f[i+1]] = v
		}
		out = append(out, res)
	}
	return out, sc.Err()
}

// number reads a parameter value as a number: sizes with B, KiB, MiB,
// GiB (or K, M, G) suffixes are bytes.
func number(v string) (float64, bool) {
	mul := 1.0
	s := v
	for _, suf := range []struct {
		s string
		m float64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"k", 1 << 10}, {"B", 1}} {
		if strings.HasSuffix(s, suf.s) {
			s, mul = strings.TrimSuffix(s, suf.s), suf.m
			break
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	return f * mul, err == nil
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// charts builds a chart per benchmark and metric.
func charts(rs []result, xKey, seriesKey string, metrics []string) map[string]*plot.Chart {
	out := map[string]*plot.Chart{}
	type key struct{ bench, metric string }
	type point struct {
		series string
		x      float64
	}
	acc := map[key]map[point][]float64{}
	for _, r := range rs {
		x, ok := number(r.params[xKey])
		if !ok {
			continue
		}
		for _, m := range metrics {
			v, ok := r.values[m]
			if !ok {
				continue
			}
			k := key{r.bench, m}
			if acc[k] == nil {
				acc[k] = map[point][]float64{}
			}
			p := point{r.params[seriesKey], x}
			acc[k][p] = append(acc[k][p], v)
		}
	}
	for k, pts := range acc {
		byS := map[string][]point{}
		for p := range pts {
			byS[p.series] = append(byS[p.series], p)
		}
		names := make([]string, 0, len(byS))
		for s := range byS {
			names = append(names, s)
		}
		sort.Strings(names)
		c := &plot.Chart{Title: strings.TrimPrefix(k.bench, "Benchmark") + ": " + k.metric + " (median)", XLabel: xKey, YLabel: k.metric, LogX: true}
		for _, name := range names {
			ps := byS[name]
			sort.Slice(ps, func(i, j int) bool { return ps[i].x < ps[j].x })
			s := plot.Series{Name: name, Dashed: strings.HasPrefix(name, "raw")}
			for _, p := range ps {
				s.X, s.Y = append(s.X, p.x), append(s.Y, median(pts[p]))
			}
			c.Series = append(c.Series, s)
		}
		file := strings.NewReplacer("/", "_", " ", "_").Replace(strings.TrimPrefix(k.bench, "Benchmark")) + "-" + strings.NewReplacer("/", "per", " ", "_").Replace(k.metric) + ".svg"
		out[file] = c
	}
	return out
}

func main() {
	outDir := flag.String("out", "plots", "directory to write the SVG charts into")
	xKey := flag.String("x", "size", "sub-benchmark `KEY` for the horizontal axis")
	seriesKey := flag.String("series", "impl", "sub-benchmark `KEY` whose values are the lines")
	metricList := flag.String("metrics", "MB/s,ns/op", "comma-separated `UNITS` to chart")
	flag.Parse()
	rs, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchplot:", err)
		os.Exit(1)
	}
	cs := charts(rs, *xKey, *seriesKey, strings.Split(*metricList, ","))
	if len(cs) == 0 {
		fmt.Fprintf(os.Stderr, "benchplot: no result has a %s= part and one of the metrics %s\n", *xKey, *metricList)
		os.Exit(1)
	}
	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "benchplot:", err)
		os.Exit(1)
	}
	for name, c := range cs {
		f, err := os.Create(filepath.Join(*outDir, name))
		if err == nil {
			err = c.WriteSVG(f)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil && !errors.Is(err, plot.ErrNoData) {
			fmt.Fprintln(os.Stderr, "benchplot:", err)
			os.Exit(1)
		}
		fmt.Println(filepath.Join(*outDir, name))
	}
}
