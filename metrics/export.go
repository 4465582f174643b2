package metrics

import (
	"bufio"
	"io"
	"math"
	"strconv"
	"strings"
)

// WritePrometheus writes the snapshot in the Prometheus text exposition
// format (version 0.0.4): counters as NAME_total, histograms with
// cumulative buckets in seconds, NAME_sum and NAME_count.
func (s *Snapshot) WritePrometheus(w io.Writer) error {
	bw := bufio.NewWriter(w)
	for _, f := range s.Families {
		name := f.Desc.FullName()
		if f.Kind == KindCounter {
			name += "_total"
		}
		bw.WriteString("# HELP " + name + " " + escapeHelp(f.Desc.Help) + "\n")
		bw.WriteString("# TYPE " + name + " " + f.Kind.String() + "\n")
		for _, sm := range f.Samples {
			if sm.Hist == nil {
				bw.WriteString(name + labels(f.Desc.Labels, sm.LabelValues, "") + " " + formatFloat(sm.Value) + "\n")
				continue
			}
			var cum uint64
			for i, c := range sm.Hist.Counts {
				cum += c
				le := "+Inf"
				if i < HistogramBuckets {
					le = formatFloat(BucketBound(i).Seconds())
				}
				bw.WriteString(name + "_bucket" + labels(f.Desc.Labels, sm.LabelValues, le) + " " + strconv.FormatUint(cum, 10) + "\n")
			}
			l := labels(f.Desc.Labels, sm.LabelValues, "")
			bw.WriteString(name + "_sum" + l + " " + formatFloat(sm.Hist.Sum.Seconds()) + "\n")
			bw.WriteString(name + "_count" + l + " " + strconv.FormatUint(sm.Hist.Count, 10) + "\n")
		}
	}
	return bw.Flush()
}

// labels formats {a="x",b="y"} (with le last when set), or "" for none.
func labels(names, values []string, le string) string {
	if len(names) == 0 && le == "" {
		return ""
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, n := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(n + `="` + escapeLabel(values[i]) + `"`)
	}
	if le != "" {
		if len(names) > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`le="` + le + `"`)
	}
	b.WriteByte('}')
	return b.String()
}

func escapeLabel(v string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`).Replace(v)
}

func escapeHelp(v string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(v)
}

func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// PerfDump returns the snapshot as Ceph's `perf dump` shows counters: an
// object per subsystem, each metric under its name ("msgr" →
// "messages_received"). A labelled family is shown as its total under
// its name and, under NAME_by_LABELS, an object from the label values
// (joined by ",") to each value. A histogram is shown as Ceph shows a
// latency: {"avgcount", "sum" (seconds), "avgtime" (seconds)}, plus
// p50_seconds and p99_seconds estimated from its buckets.
func (s *Snapshot) PerfDump() map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, f := range s.Families {
		sub := out[f.Desc.Subsystem]
		if sub == nil {
			sub = map[string]any{}
			out[f.Desc.Subsystem] = sub
		}
		if f.Kind == KindHistogram {
			var all HistogramSnapshot
			by := map[string]any{}
			for _, sm := range f.Samples {
				for i, c := range sm.Hist.Counts {
					all.Counts[i] += c
				}
				all.Count += sm.Hist.Count
				all.Sum += sm.Hist.Sum
				if len(f.Desc.Labels) > 0 {
					by[strings.Join(sm.LabelValues, ",")] = latency(sm.Hist)
				}
			}
			sub[f.Desc.Name] = latency(&all)
			if len(f.Desc.Labels) > 0 {
				sub[f.Desc.Name+"_by_"+strings.Join(f.Desc.Labels, "_")] = by
			}
			continue
		}
		var total float64
		by := map[string]any{}
		for _, sm := range f.Samples {
			total += sm.Value
			if len(f.Desc.Labels) > 0 {
				by[strings.Join(sm.LabelValues, ",")] = number(sm.Value)
			}
		}
		sub[f.Desc.Name] = number(total)
		if len(f.Desc.Labels) > 0 {
			sub[f.Desc.Name+"_by_"+strings.Join(f.Desc.Labels, "_")] = by
		}
	}
	return out
}

// number keeps integral values integers in JSON, and writes a value
// JSON cannot hold (NaN, ±Inf, which a GaugeFunc may return) as null.
func number(v float64) any {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
		return int64(v)
	}
	return v
}

func latency(h *HistogramSnapshot) map[string]any {
	avg := 0.0
	if h.Count > 0 {
		avg = h.Sum.Seconds() / float64(h.Count)
	}
	return map[string]any{
		"avgcount": h.Count, "sum": h.Sum.Seconds(), "avgtime": avg,
		"p50_seconds": h.Quantile(0.5).Seconds(), "p99_seconds": h.Quantile(0.99).Seconds(),
	}
}
