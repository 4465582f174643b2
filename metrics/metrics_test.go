package metrics

import (
	"encoding/json"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestCountersExact(t *testing.T) {
	r := NewRegistry()
	recv := r.CounterVec(Desc{Subsystem: "msgr", Name: "messages_received", Help: "Messages received.", Labels: []string{"peer_type"}})
	osd, cli := recv.With("osd"), recv.With("client")
	if recv.With("osd") != osd {
		t.Fatal("With returned a new counter for the same labels")
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				osd.Inc()
			}
			cli.Add(3)
		}()
	}
	wg.Wait()
	g := r.Gauge(Desc{Subsystem: "msgr", Name: "connections", Help: "Open connections."})
	g.Add(5)
	g.Add(-2)
	r.GaugeFunc(Desc{Subsystem: "msgr", Name: "out_queue_bytes", Help: "Bytes queued."}, func() float64 { return 42 })
	s := r.Snapshot()
	if v, _ := s.Value("ferry_msgr_messages_received", "osd"); v != 8000 {
		t.Errorf("osd %v, want 8000", v)
	}
	if v, _ := s.Value("ferry_msgr_messages_received", "client"); v != 24 {
		t.Errorf("client %v, want 24", v)
	}
	if got := s.Total("ferry_msgr_messages_received"); got != 8024 {
		t.Errorf("total %v", got)
	}
	if got := s.Total("ferry_msgr_connections"); got != 3 {
		t.Errorf("gauge %v", got)
	}
	if got := s.Total("ferry_msgr_out_queue_bytes"); got != 42 {
		t.Errorf("gauge func %v", got)
	}
	// Registering again returns the same metric.
	if r.CounterVec(Desc{Subsystem: "msgr", Name: "messages_received", Labels: []string{"peer_type"}}).With("osd") != osd {
		t.Error("re-registration made a new family")
	}
}

func TestHistogramBuckets(t *testing.T) {
	var h Histogram
	for _, d := range []time.Duration{0, time.Microsecond, 1500 * time.Nanosecond, 2 * time.Microsecond, 3 * time.Microsecond, time.Millisecond, time.Hour} {
		h.Observe(d)
	}
	s := h.Snapshot()
	want := map[int]uint64{0: 2, 1: 2, 2: 1, 10: 1, HistogramBuckets: 1} // 1ms = 1000us <= 1024us
	for i, c := range s.Counts {
		if c != want[i] {
			t.Errorf("bucket %d (<= %v): %d, want %d", i, BucketBound(min(i, HistogramBuckets-1)), c, want[i])
		}
	}
	if s.Count != 7 || s.Sum != time.Hour+time.Millisecond+7500*time.Nanosecond {
		t.Errorf("count %d sum %v", s.Count, s.Sum)
	}
	if q := s.Quantile(0.5); q != 2*time.Microsecond {
		t.Errorf("p50 %v, want 2µs", q)
	}
}

func TestWritePrometheus(t *testing.T) {
	r := NewRegistry()
	r.CounterVec(Desc{Subsystem: "msgr", Name: "messages_sent", Help: "Messages sent.", Labels: []string{"peer_type"}}).With(`o"sd`).Add(7)
	h := r.Histogram(Desc{Subsystem: "rpc", Name: "request_latency_seconds", Help: "RPC latency\nin seconds."})
	h.Observe(3 * time.Microsecond)
	var b strings.Builder
	s := r.Snapshot()
	if err := s.WritePrometheus(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, line := range []string{
		"# HELP ferry_msgr_messages_sent_total Messages sent.",
		"# TYPE ferry_msgr_messages_sent_total counter",
		`ferry_msgr_messages_sent_total{peer_type="o\"sd"} 7`,
		`# HELP ferry_rpc_request_latency_seconds RPC latency\nin seconds.`,
		"# TYPE ferry_rpc_request_latency_seconds histogram",
		`ferry_rpc_request_latency_seconds_bucket{le="2e-06"} 0`,
		`ferry_rpc_request_latency_seconds_bucket{le="4e-06"} 1`,
		`ferry_rpc_request_latency_seconds_bucket{le="+Inf"} 1`,
		"ferry_rpc_request_latency_seconds_sum 3e-06",
		"ferry_rpc_request_latency_seconds_count 1",
	} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("exposition lacks %q:\n%s", line, out)
		}
	}
}

func TestPerfDump(t *testing.T) {
	r := NewRegistry()
	v := r.CounterVec(Desc{Subsystem: "msgr", Name: "messages_received", Help: "x", Labels: []string{"peer_type"}})
	v.With("osd").Add(2)
	v.With("mon").Add(3)
	r.Histogram(Desc{Subsystem: "rpc", Name: "request_latency_seconds", Help: "x"}).Observe(time.Millisecond)
	s := r.Snapshot()
	b, err := json.Marshal(s.PerfDump())
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Msgr struct {
			Received int            `json:"messages_received"`
			By       map[string]int `json:"messages_received_by_peer_type"`
		} `json:"msgr"`
		RPC struct {
			Lat struct {
				Count   int     `json:"avgcount"`
				AvgTime float64 `json:"avgtime"`
			} `json:"request_latency_seconds"`
		} `json:"rpc"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Msgr.Received != 5 || got.Msgr.By["osd"] != 2 || got.Msgr.By["mon"] != 3 || got.RPC.Lat.Count != 1 || got.RPC.Lat.AvgTime != 0.001 {
		t.Errorf("perf dump %s", b)
	}
}

func TestRegisterConflictPanics(t *testing.T) {
	r := NewRegistry()
	r.Counter(Desc{Subsystem: "a", Name: "b"})
	defer func() {
		if recover() == nil {
			t.Error("registering a counter's name as a gauge did not panic")
		}
	}()
	r.Gauge(Desc{Subsystem: "a", Name: "b"})
}

// TestExportedNameConflictPanics: a family whose exported series
// another family writes (a gauge n_total beside a counter n, a gauge
// h_count beside a histogram h) is refused, as an invalid exposition
// would otherwise come out.
func TestExportedNameConflictPanics(t *testing.T) {
	for _, tc := range []struct {
		name        string
		first, then func(r *Registry)
	}{
		{"gauge n_total after counter n",
			func(r *Registry) { r.Counter(Desc{Subsystem: "s", Name: "n"}) },
			func(r *Registry) { r.Gauge(Desc{Subsystem: "s", Name: "n_total"}) }},
		{"counter n after gauge n_total",
			func(r *Registry) { r.Gauge(Desc{Subsystem: "s", Name: "n_total"}) },
			func(r *Registry) { r.Counter(Desc{Subsystem: "s", Name: "n"}) }},
		{"gauge h_count after histogram h",
			func(r *Registry) { r.Histogram(Desc{Subsystem: "s", Name: "h"}) },
			func(r *Registry) { r.Gauge(Desc{Subsystem: "s", Name: "h_count"}) }},
	} {
		r := NewRegistry()
		tc.first(r)
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", tc.name)
				}
			}()
			tc.then(r)
		}()
	}
}

// TestFuncAndValueShareOneSeries: a Counter and a CounterFunc under one
// name are one series, their sum, not two samples of the same name.
func TestFuncAndValueShareOneSeries(t *testing.T) {
	r := NewRegistry()
	r.Counter(Desc{Subsystem: "s", Name: "n", Help: "x"}).Add(2)
	r.CounterFunc(Desc{Subsystem: "s", Name: "n", Help: "x"}, func() float64 { return 3 })
	s := r.Snapshot()
	var out strings.Builder
	if err := s.WritePrometheus(&out); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(out.String(), "\nferry_s_n_total "); got != 1 || !strings.Contains(out.String(), "ferry_s_n_total 5\n") {
		t.Errorf("exposition:\n%s\nwant one ferry_s_n_total sample of 5", out.String())
	}
}

// TestPerfDumpNonFinite: a gauge function's NaN or infinity leaves the
// perf dump valid JSON (null), rather than failing the whole dump.
func TestPerfDumpNonFinite(t *testing.T) {
	r := NewRegistry()
	r.GaugeFunc(Desc{Subsystem: "s", Name: "nan", Help: "x"}, math.NaN)
	r.GaugeFunc(Desc{Subsystem: "s", Name: "inf", Help: "x"}, func() float64 { return math.Inf(1) })
	r.Gauge(Desc{Subsystem: "s", Name: "ok", Help: "x"}).Set(7)
	s := r.Snapshot()
	b, err := json.Marshal(s.PerfDump())
	if err != nil {
		t.Fatalf("perf dump with a NaN gauge: %v", err)
	}
	var got map[string]map[string]any
	if err := json.Unmarshal(b, &got); err != nil || got["s"]["nan"] != nil || got["s"]["inf"] != nil || got["s"]["ok"] != float64(7) {
		t.Errorf("perf dump %s (%v)", b, err)
	}
}

func BenchmarkCounterInc(b *testing.B) {
	b.ReportAllocs()
	var c Counter
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Inc()
		}
	})
}

func BenchmarkHistogramObserve(b *testing.B) {
	b.ReportAllocs()
	var h Histogram
	for i := 0; b.Loop(); i++ {
		h.Observe(time.Duration(i&0xffff) * time.Microsecond)
	}
}
