// Package metrics holds ferry's counters, gauges and histograms: cheap
// enough to stay on (an update is one atomic add, nothing is locked on
// the hot path), read through one snapshot API by every exporter: the
// Prometheus text exposition (WritePrometheus, dependency-free), Ceph's
// `perf dump` JSON (PerfDump, for the admin socket), and the Prometheus
// client library's collector in the separate module contrib/prometheus.
//
// A metric belongs to a subsystem ("msgr", "rpc", "bulk") and has a name
// with its unit in it ("messages_received", "received_bytes",
// "request_latency_seconds"). Exported, a counter is named
// ferry_SUBSYSTEM_NAME_total and a gauge or histogram ferry_SUBSYSTEM_NAME
// for Prometheus, and SUBSYSTEM.NAME in perf dump. Labels are few and
// bounded (a peer type, an opcode, an error code), never a connection:
// callers look a labelled child up once (With) and keep its pointer, so
// the hot path only adds.
package metrics

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Kind is what a metric measures.
type Kind uint8

// Kinds.
const (
	KindCounter   Kind = iota + 1 // a count that only goes up
	KindGauge                     // a level that goes up and down
	KindHistogram                 // a distribution of durations
)

func (k Kind) String() string {
	switch k {
	case KindCounter:
		return "counter"
	case KindGauge:
		return "gauge"
	case KindHistogram:
		return "histogram"
	}
	return "untyped"
}

// Desc describes a metric family.
type Desc struct {
	Subsystem string   // "msgr", "rpc", "bulk"
	Name      string   // with its unit: "received_bytes", "request_latency_seconds"
	Help      string   // one sentence, with the unit
	Labels    []string // label names, e.g. "peer_type"; none for a single metric
}

// FullName is the Prometheus name of the family (without _total).
func (d *Desc) FullName() string { return "ferry_" + d.Subsystem + "_" + d.Name }

// Counter counts up. Its methods are safe for concurrent use.
type Counter struct{ v atomic.Uint64 }

// Inc adds one.
func (c *Counter) Inc() { c.v.Add(1) }

// Add adds n.
func (c *Counter) Add(n uint64) { c.v.Add(n) }

// Value returns the count.
func (c *Counter) Value() uint64 { return c.v.Load() }

// Gauge is a level. Its methods are safe for concurrent use.
type Gauge struct{ v atomic.Int64 }

// Set sets the level.
func (g *Gauge) Set(v int64) { g.v.Store(v) }

// Add adds d (which may be negative).
func (g *Gauge) Add(d int64) { g.v.Add(d) }

// Value returns the level.
func (g *Gauge) Value() int64 { return g.v.Load() }

// HistogramBuckets is the number of buckets of a Histogram: bucket i
// counts durations of at most 2^i microseconds (1 µs to about 67 s), and
// one more counts the rest.
const HistogramBuckets = 27

// Histogram counts durations in power-of-two buckets of microseconds and
// keeps their sum. Its methods are safe for concurrent use.
type Histogram struct {
	counts [HistogramBuckets + 1]atomic.Uint64
	sum    atomic.Uint64 // nanoseconds
}

// Observe records d.
func (h *Histogram) Observe(d time.Duration) {
	if d < 0 {
		d = 0
	}
	us := uint64(d+time.Microsecond-1) / uint64(time.Microsecond) // ceiling
	i := 0
	if us > 1 {
		i = bits.Len64(us - 1) // smallest i with us <= 2^i
	}
	h.counts[min(i, HistogramBuckets)].Add(1)
	h.sum.Add(uint64(d))
}

// BucketBound returns the upper bound of bucket i (i < HistogramBuckets).
func BucketBound(i int) time.Duration { return time.Duration(1<<i) * time.Microsecond }

// HistogramSnapshot is a histogram's state: Counts[i] durations of at
// most BucketBound(i) and above the previous bound, Counts[HistogramBuckets]
// the rest.
type HistogramSnapshot struct {
	Counts [HistogramBuckets + 1]uint64
	Count  uint64
	Sum    time.Duration
}

// Snapshot returns the histogram's state.
func (h *Histogram) Snapshot() HistogramSnapshot {
	var s HistogramSnapshot
	for i := range h.counts {
		s.Counts[i] = h.counts[i].Load()
		s.Count += s.Counts[i]
	}
	s.Sum = time.Duration(h.sum.Load())
	return s
}

// Quantile estimates the q-quantile (0..1) as the upper bound of the
// bucket it falls in; 0 when empty.
func (s *HistogramSnapshot) Quantile(q float64) time.Duration {
	if s.Count == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(s.Count)))
	var seen uint64
	for i, c := range s.Counts {
		seen += c
		if seen >= max(rank, 1) {
			if i == HistogramBuckets {
				return BucketBound(HistogramBuckets-1) * 2
			}
			return BucketBound(i)
		}
	}
	return BucketBound(HistogramBuckets-1) * 2
}

// family is a registered metric family: its children by label values.
type family struct {
	desc Desc
	kind Kind

	mu       sync.Mutex
	children map[string]*child // key: label values joined by \xff
	order    []*child
	fns      []func() float64 // computed when read, summed (a CounterFunc or GaugeFunc)
}

type child struct {
	values []string
	c      Counter
	g      Gauge
	h      Histogram
}

func (f *family) child(values []string) *child {
	if len(values) != len(f.desc.Labels) {
		panic(fmt.Sprintf("metrics: %s takes %d label values, got %d", f.desc.FullName(), len(f.desc.Labels), len(values)))
	}
	key := strings.Join(values, "\xff")
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.children[key]; ok {
		return c
	}
	c := &child{values: slices.Clone(values)}
	if f.children == nil {
		f.children = map[string]*child{}
	}
	f.children[key] = c
	f.order = append(f.order, c)
	return c
}

// Registry holds metric families. Its methods are safe for concurrent
// use; registration takes a lock, updates through the returned metrics
// do not.
type Registry struct {
	mu       sync.Mutex
	families []*family
	byName   map[string]*family
	// exported maps each name a family's samples are exported under
	// (NAME_total for a counter, NAME_bucket, _sum and _count for a
	// histogram) to the family's name, so that two families cannot
	// write one series.
	exported map[string]string
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{byName: map[string]*family{}, exported: map[string]string{}}
}

// exportedNames are the names the Prometheus exposition writes a family
// of kind k named name under.
func exportedNames(name string, k Kind) []string {
	switch k {
	case KindCounter:
		return []string{name + "_total"}
	case KindHistogram:
		return []string{name, name + "_bucket", name + "_sum", name + "_count"}
	}
	return []string{name}
}

// register returns the family named by d, creating it; registering the
// same name again with the same kind and labels returns the existing
// family (two messengers sharing a registry share their metrics), and
// with another kind or labels panics, as does a name whose exported
// series another family writes (a gauge n_total beside a counter n).
func (r *Registry) register(d Desc, k Kind) *family {
	r.mu.Lock()
	defer r.mu.Unlock()
	name := d.FullName()
	if f, ok := r.byName[name]; ok {
		if f.kind != k || !slices.Equal(f.desc.Labels, d.Labels) {
			panic("metrics: " + name + " registered twice with different kinds or labels")
		}
		return f
	}
	names := exportedNames(name, k)
	for _, n := range names {
		if other, ok := r.exported[n]; ok {
			panic("metrics: " + name + " would export " + n + ", which " + other + " exports")
		}
	}
	for _, n := range names {
		r.exported[n] = name
	}
	f := &family{desc: d, kind: k}
	r.byName[name] = f
	r.families = append(r.families, f)
	return f
}

// Counter registers (or finds) a counter without labels.
func (r *Registry) Counter(d Desc) *Counter { return &r.register(d, KindCounter).child(nil).c }

// Gauge registers (or finds) a gauge without labels.
func (r *Registry) Gauge(d Desc) *Gauge { return &r.register(d, KindGauge).child(nil).g }

// GaugeFunc registers a gauge without labels whose value fn computes
// each time it is read (fn must be cheap and safe for concurrent use).
// Registering the name again adds fn: the family's value is the sum of
// its functions (two instances sharing a registry).
func (r *Registry) GaugeFunc(d Desc, fn func() float64) { r.addFunc(d, KindGauge, fn) }

// CounterFunc registers a counter without labels read from fn (a count
// kept elsewhere, such as a Stats field), which must only go up. As with
// GaugeFunc, functions registered under one name are summed.
func (r *Registry) CounterFunc(d Desc, fn func() float64) { r.addFunc(d, KindCounter, fn) }

func (r *Registry) addFunc(d Desc, k Kind, fn func() float64) {
	if len(d.Labels) > 0 {
		panic("metrics: " + d.FullName() + ": a function metric takes no labels")
	}
	f := r.register(d, k)
	f.mu.Lock()
	f.fns = append(f.fns, fn)
	f.mu.Unlock()
}

// Histogram registers (or finds) a histogram without labels.
func (r *Registry) Histogram(d Desc) *Histogram { return &r.register(d, KindHistogram).child(nil).h }

// CounterVec is a counter family with labels.
type CounterVec struct{ f *family }

// CounterVec registers (or finds) a labelled counter family.
func (r *Registry) CounterVec(d Desc) CounterVec { return CounterVec{r.register(d, KindCounter)} }

// With returns the counter for the label values (in Desc.Labels order),
// creating it. Keep the pointer: With takes a lock.
func (v CounterVec) With(values ...string) *Counter { return &v.f.child(values).c }

// GaugeVec is a gauge family with labels.
type GaugeVec struct{ f *family }

// GaugeVec registers (or finds) a labelled gauge family.
func (r *Registry) GaugeVec(d Desc) GaugeVec { return GaugeVec{r.register(d, KindGauge)} }

// With returns the gauge for the label values, creating it.
func (v GaugeVec) With(values ...string) *Gauge { return &v.f.child(values).g }

// HistogramVec is a histogram family with labels.
type HistogramVec struct{ f *family }

// HistogramVec registers (or finds) a labelled histogram family.
func (r *Registry) HistogramVec(d Desc) HistogramVec {
	return HistogramVec{r.register(d, KindHistogram)}
}

// With returns the histogram for the label values, creating it.
func (v HistogramVec) With(values ...string) *Histogram { return &v.f.child(values).h }

// Sample is one metric of a family at the time of a snapshot.
type Sample struct {
	LabelValues []string
	// Value is a counter's count or a gauge's level.
	Value float64
	// Hist is a histogram's state (KindHistogram only).
	Hist *HistogramSnapshot
}

// Family is one family in a snapshot.
type Family struct {
	Desc    Desc
	Kind    Kind
	Samples []Sample
}

// Snapshot is the state of every family of a registry, in registration
// order, each family's samples in the order they were first used.
type Snapshot struct{ Families []Family }

// Snapshot reads every metric. Values are read one by one with atomic
// loads, so a snapshot taken under load is not one instant, but every
// counter in it is at least what it was at the snapshot's start.
func (r *Registry) Snapshot() Snapshot {
	r.mu.Lock()
	fams := slices.Clone(r.families)
	r.mu.Unlock()
	var s Snapshot
	for _, f := range fams {
		out := Family{Desc: f.desc, Kind: f.kind}
		f.mu.Lock()
		children := slices.Clone(f.order)
		fns := slices.Clone(f.fns)
		f.mu.Unlock()
		// The functions' sum is the family's unlabelled value; a Counter
		// or Gauge registered under the same name adds to it rather than
		// writing a second series of the same name.
		fnAt := -1
		if len(fns) > 0 {
			var v float64
			for _, fn := range fns {
				v += fn()
			}
			fnAt = len(out.Samples)
			out.Samples = append(out.Samples, Sample{Value: v})
		}
		for _, c := range children {
			sm := Sample{LabelValues: c.values}
			switch f.kind {
			case KindCounter:
				sm.Value = float64(c.c.Value())
			case KindGauge:
				sm.Value = float64(c.g.Value())
			case KindHistogram:
				h := c.h.Snapshot()
				sm.Hist = &h
			}
			if fnAt >= 0 && len(c.values) == 0 && sm.Hist == nil {
				out.Samples[fnAt].Value += sm.Value
				continue
			}
			out.Samples = append(out.Samples, sm)
		}
		s.Families = append(s.Families, out)
	}
	return s
}

// Lookup returns the family with the Prometheus name (without _total),
// for tests and tools.
func (s *Snapshot) Lookup(fullName string) (Family, bool) {
	for _, f := range s.Families {
		if f.Desc.FullName() == fullName {
			return f, true
		}
	}
	return Family{}, false
}

// Total returns the sum of a counter or gauge family's samples (the
// count of observations for a histogram), or 0 if it is absent.
func (s *Snapshot) Total(fullName string) float64 {
	f, ok := s.Lookup(fullName)
	if !ok {
		return 0
	}
	var t float64
	for _, sm := range f.Samples {
		if sm.Hist != nil {
			t += float64(sm.Hist.Count)
		} else {
			t += sm.Value
		}
	}
	return t
}

// Value returns the value of the sample with the given label values.
func (s *Snapshot) Value(fullName string, labelValues ...string) (float64, bool) {
	f, ok := s.Lookup(fullName)
	if !ok {
		return 0, false
	}
	for _, sm := range f.Samples {
		if slices.Equal(sm.LabelValues, labelValues) {
			if sm.Hist != nil {
				return float64(sm.Hist.Count), true
			}
			return sm.Value, true
		}
	}
	return 0, false
}
