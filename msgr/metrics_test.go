package msgr_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/metrics"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/transport"
)

// TestMetricsAfterTraffic: after n echoed messages of known sizes, both
// messengers' counters hold exactly those messages and bytes, labelled
// by the peer's type and the message type.
func TestMetricsAfterTraffic(t *testing.T) {
	reg := transport.NewRegistry(transport.NewTCP(transport.TCPOptions{}))
	sreg := metrics.NewRegistry()
	srv := echoServer(t, reg, "tcp://127.0.0.1:0", msgr.Config{Metrics: sreg})
	cli, err := msgr.New(msgr.Config{Transports: reg, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	col := newCollector()
	cli.AddDispatcherTail(col)
	if err := cli.Start(); err != nil {
		t.Fatal(err)
	}
	defer cli.Shutdown()
	conn, err := cli.Connect(srv.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	const n = 25
	var bytes uint64
	for i := range n {
		m := msg.New(testType)
		m.Header.Tid = uint64(i + 1)
		m.Front = msg.Buffers{make([]byte, 10+i)}
		m.Data = msg.Buffers{make([]byte, 1000*i)}
		bytes += uint64(m.Len())
		if err := conn.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		select {
		case <-col.ch:
		case <-time.After(20 * time.Second):
			t.Fatal("echoes did not arrive")
		}
	}
	ty := strconv.Itoa(testType)
	if testType >= 256 {
		ty = "other"
	}
	cs := cli.Metrics().Snapshot()
	ss := sreg.Snapshot()
	for _, c := range []struct {
		s      metrics.Snapshot
		name   string
		labels []string
		want   float64
	}{
		{cs, "ferry_msgr_messages_sent", []string{"osd", ty}, n},
		{cs, "ferry_msgr_messages_received", []string{"osd", ty}, n},
		{cs, "ferry_msgr_sent_bytes", []string{"osd"}, float64(bytes)},
		{cs, "ferry_msgr_received_bytes", []string{"osd"}, float64(bytes)},
		{ss, "ferry_msgr_messages_received", []string{"client", ty}, n},
		{ss, "ferry_msgr_messages_sent", []string{"client", ty}, n},
		{ss, "ferry_msgr_received_bytes", []string{"client"}, float64(bytes)},
		{ss, "ferry_msgr_connections", nil, 1},
		{cs, "ferry_msgr_connections", nil, 1},
	} {
		if got, _ := c.s.Value(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// At least the n messages each way, plus the handshake's frames.
	if got := ss.Total("ferry_msgr_frames_received"); got < n+4 {
		t.Errorf("server frames_received %v, want at least %d", got, n+4)
	}
	if got := cs.Total("ferry_msgr_frames_sent"); got < n {
		t.Errorf("client frames_sent %v, want at least %d", got, n)
	}
	var b strings.Builder
	if err := ss.WritePrometheus(&b); err != nil {
		t.Fatal(err)
	}
	want := `ferry_msgr_messages_received_total{peer_type="client",msg_type="` + ty + `"} ` + strconv.Itoa(n)
	if !strings.Contains(b.String(), want+"\n") {
		t.Errorf("exposition lacks %q:\n%s", want, b.String())
	}
	pd := ss.PerfDump()
	if got := pd["msgr"]["messages_received"]; got != int64(n) {
		t.Errorf("perf dump msgr.messages_received = %v, want %d", got, n)
	}
}

// TestNoMetrics: with Config.NoMetrics the messenger registers nothing
// and traffic still flows.
func TestNoMetrics(t *testing.T) {
	r := metrics.NewRegistry()
	m, err := msgr.New(msgr.Config{Metrics: r, NoMetrics: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown()
	if s := r.Snapshot(); len(s.Families) != 0 {
		t.Errorf("NoMetrics registered %d families", len(s.Families))
	}
}

// BenchmarkMetricsOverhead is a 64-byte echo round trip over loopback
// TCP, one in flight, with the counters on and off, in one run:
//
//	go test -run '^$' -bench MetricsOverhead -count 10 ./msgr
func BenchmarkMetricsOverhead(b *testing.B) {
	for _, off := range []bool{false, true} {
		name := "metrics=on"
		if off {
			name = "metrics=off"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			reg := transport.NewRegistry(transport.NewTCP(transport.TCPOptions{}))
			srv := echoServer(b, reg, "tcp://127.0.0.1:0", msgr.Config{NoMetrics: off})
			cli, col := newClient(b, reg, msgr.Config{NoMetrics: off})
			conn, err := cli.Connect(srv.ListenAddrs()[0])
			if err != nil {
				b.Fatal(err)
			}
			payload := make([]byte, 64)
			for i := 0; b.Loop(); i++ {
				m := msg.New(testType)
				m.Header.Tid = uint64(i + 1)
				m.Front = msg.Buffers{payload}
				if err := conn.Send(m); err != nil {
					b.Fatal(err)
				}
				<-col.ch
			}
		})
	}
}
