package prometheus_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	ferryprom "github.com/ferrymsg/ferry/contrib/prometheus"
	"github.com/ferrymsg/ferry/metrics"
)

func sample() *metrics.Registry {
	r := metrics.NewRegistry()
	v := r.CounterVec(metrics.Desc{Subsystem: "msgr", Name: "messages_received", Help: "Messages received.", Labels: []string{"peer_type", "msg_type"}})
	v.With("osd", "2").Add(5)
	v.With("client", `we"ird`).Add(1)
	r.Gauge(metrics.Desc{Subsystem: "msgr", Name: "connections", Help: "Connections."}).Set(3)
	h := r.Histogram(metrics.Desc{Subsystem: "rpc", Name: "request_latency_seconds", Help: "Latency."})
	h.Observe(3 * time.Microsecond)
	h.Observe(time.Second)
	return r
}

func parse(t *testing.T, r io.Reader) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		t.Fatalf("Prometheus's text parser refuses the exposition: %v", err)
	}
	return fams
}

func counter(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		for _, lp := range m.GetLabel() {
			if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
				continue next
			}
		}
		if c := m.GetCounter(); c != nil {
			return c.GetValue(), true
		}
		if g := m.GetGauge(); g != nil {
			return g.GetValue(), true
		}
	}
	return 0, false
}

// TestExpositionParses: the core's dependency-free exposition is read by
// Prometheus's own text parser with the same values.
func TestExpositionParses(t *testing.T) {
	var b strings.Builder
	s := sample().Snapshot()
	if err := s.WritePrometheus(&b); err != nil {
		t.Fatal(err)
	}
	fams := parse(t, strings.NewReader(b.String()))
	if v, ok := counter(fams, "ferry_msgr_messages_received_total", map[string]string{"peer_type": "osd", "msg_type": "2"}); !ok || v != 5 {
		t.Errorf("messages_received{osd,2} = %v %v", v, ok)
	}
	if v, ok := counter(fams, "ferry_msgr_messages_received_total", map[string]string{"msg_type": `we"ird`}); !ok || v != 1 {
		t.Errorf("escaped label: %v %v", v, ok)
	}
	if v, _ := counter(fams, "ferry_msgr_connections", nil); v != 3 {
		t.Errorf("gauge %v", v)
	}
	h := fams["ferry_rpc_request_latency_seconds"].GetMetric()[0].GetHistogram()
	if h.GetSampleCount() != 2 || h.GetSampleSum() < 1 || h.GetSampleSum() > 1.0001 {
		t.Errorf("histogram count %d sum %v", h.GetSampleCount(), h.GetSampleSum())
	}
}

// TestCollector: the client_golang collector gathers the same values.
func TestCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(ferryprom.NewCollector(sample()))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		byName[f.GetName()] = f
	}
	if v, ok := counter(byName, "ferry_msgr_messages_received_total", map[string]string{"peer_type": "osd"}); !ok || v != 5 {
		t.Errorf("gathered messages_received{osd} = %v %v", v, ok)
	}
	if h := byName["ferry_rpc_request_latency_seconds"].GetMetric()[0].GetHistogram(); h.GetSampleCount() != 2 {
		t.Errorf("gathered histogram %v", h)
	}
}

// TestScrapeFerryServe: ferry serve --metrics, after ferry ping, serves
// a /metrics that Prometheus's parser reads, counting exactly the pings.
func TestScrapeFerryServe(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "ferry")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/ferrymsg/ferry/cmd/ferry").CombinedOutput(); err != nil {
		t.Fatalf("building ferry: %v\n%s", err, out)
	}
	srv := exec.CommandContext(ctx, bin, "serve", "--listen", "tcp://127.0.0.1:0", "--metrics", "127.0.0.1:0")
	srv.Stderr = os.Stderr
	stdout, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	br := bufio.NewReader(stdout)
	l1, _ := br.ReadString('\n')
	l2, _ := br.ReadString('\n')
	addr, ok1 := strings.CutPrefix(strings.TrimSpace(l1), "listening ")
	url, ok2 := strings.CutPrefix(strings.TrimSpace(l2), "metrics ")
	if !ok1 || !ok2 {
		t.Fatalf("serve printed %q then %q, want listening ADDR then metrics URL", l1, l2)
	}
	const pings = 7
	if out, err := exec.CommandContext(ctx, bin, "ping", "--count", "7", "--size", "100", addr).CombinedOutput(); err != nil {
		t.Fatalf("ping: %v\n%s", err, out)
	}
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	fams := parse(t, resp.Body)
	if v, ok := counter(fams, "ferry_msgr_messages_received_total", map[string]string{"peer_type": "client", "msg_type": "2"}); !ok || v != pings {
		t.Errorf("ferry_msgr_messages_received_total{client,2} = %v (%v), want %d", v, ok, pings)
	}
	if v, ok := counter(fams, "ferry_msgr_messages_sent_total", map[string]string{"peer_type": "client", "msg_type": "2"}); !ok || v != pings {
		t.Errorf("ferry_msgr_messages_sent_total{client,2} = %v (%v), want %d", v, ok, pings)
	}
	if v, _ := counter(fams, "ferry_msgr_received_bytes_total", map[string]string{"peer_type": "client"}); v != pings*100 {
		t.Errorf("received_bytes{client} = %v, want %d", v, pings*100)
	}
	pp, err := http.Get(strings.TrimSuffix(url, "/metrics") + "/debug/pprof/")
	if err != nil || pp.StatusCode != 200 {
		t.Errorf("/debug/pprof/: %v %v", err, pp)
	}
	if pp != nil {
		pp.Body.Close()
	}
}
