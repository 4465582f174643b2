// Package prometheus exports ferry's metrics (package metrics) to the
// Prometheus client library: a Collector that reads one snapshot of a
// registry per scrape. It is a module of its own, so that users of
// ferry's core do not inherit client_golang; the core serves the same
// metrics without it (metrics.Snapshot.WritePrometheus, ferry serve
// --metrics).
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(ferryprom.NewCollector(messenger.Metrics()))
package prometheus

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrymsg/ferry/metrics"
)

// Collector is a prometheus.Collector over a ferry metrics registry.
type Collector struct{ reg *metrics.Registry }

// NewCollector returns a collector for reg.
func NewCollector(reg *metrics.Registry) *Collector { return &Collector{reg: reg} }

// Describe sends nothing: the collector is unchecked, since a ferry
// registry gains labelled children as traffic arrives.
func (c *Collector) Describe(chan<- *prometheus.Desc) {}

// Collect sends every metric of one snapshot.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.reg.Snapshot()
	for _, f := range s.Families {
		name := f.Desc.FullName()
		if f.Kind == metrics.KindCounter {
			name += "_total"
		}
		desc := prometheus.NewDesc(name, f.Desc.Help, f.Desc.Labels, nil)
		for _, sm := range f.Samples {
			var m prometheus.Metric
			var err error
			switch f.Kind {
			case metrics.KindCounter:
				m, err = prometheus.NewConstMetric(desc, prometheus.CounterValue, sm.Value, sm.LabelValues...)
			case metrics.KindGauge:
				m, err = prometheus.NewConstMetric(desc, prometheus.GaugeValue, sm.Value, sm.LabelValues...)
			case metrics.KindHistogram:
				buckets := make(map[float64]uint64, metrics.HistogramBuckets)
				var cum uint64
				for i := range metrics.HistogramBuckets {
					cum += sm.Hist.Counts[i]
					buckets[metrics.BucketBound(i).Seconds()] = cum
				}
				m, err = prometheus.NewConstHistogram(desc, sm.Hist.Count, sm.Hist.Sum.Seconds(), buckets, sm.LabelValues...)
			}
			if err == nil {
				ch <- m
			}
		}
	}
}
