package selftest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/rpc"
	"github.com/ferrymsg/ferry/rpc/selftest"
)

func TestParseSizes(t *testing.T) {
	got, err := selftest.ParseSizes("(0 0), 4096 0,i0 e1048576, 1K 2M,b1048576 0")
	if err != nil {
		t.Fatal(err)
	}
	want := []selftest.SizePair{{Send: 0, Reply: 0}, {Send: 4096}, {Reply: 1 << 20}, {Send: 1024, Reply: 2 << 20}, {Send: 1 << 20, SendBulk: true}}
	if len(got) != len(want) {
		t.Fatalf("%v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%v, want %v", got, want)
		}
	}
	for _, bad := range []string{"", "1", "1 2 3", "bb1 0", "x 0", "-1 0", "0 100000000"} {
		if _, err := selftest.ParseSizes(bad); !errors.Is(err, selftest.ErrBadSizes) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if _, err := selftest.ParseSizes(selftest.DefaultSizes); err != nil {
		t.Fatal(err)
	}
}

func TestRunLocalGroup(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	g, err := selftest.StartLocalGroup(2, log)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	c, err := g.Client.NewContext(rpc.ContextOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var lastDone int
	for _, sp := range []selftest.SizePair{{}, {Send: 4096}, {Reply: 70000}, {Send: 1 << 20}, {Send: 3 << 20, SendBulk: true}, {Reply: 100000, ReplyBulk: true}, {Send: 5000, Reply: 2 << 20, SendBulk: true, ReplyBulk: true}} {
		res, err := selftest.Run(ctx, c, selftest.Config{
			Endpoints: g.Endpoints(), Sizes: sp, Reps: 200, Inflight: 8,
			Progress: func(done, total int) { lastDone = done },
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.Failures != 0 || res.RPCsPerSec <= 0 || res.Latency.Min <= 0 || res.Latency.Max < res.Latency.P50 || lastDone != 200 {
			t.Fatalf("%v: %+v", sp, res)
		}
		if len(res.PerEndpoint) != 2 || res.PerEndpoint[0].RPCs != 100 || res.PerEndpoint[1].RPCs != 100 {
			t.Fatalf("per endpoint %+v", res.PerEndpoint)
		}
		var buf bytes.Buffer
		res.Format(&buf)
		for _, s := range []string{"RPC Throughput (RPCs/sec)", "RPC Bandwidth (MB/sec)", "Median", "99th", "Std Dev", "RPC Failures: 0", "1:0 - "} {
			if !strings.Contains(buf.String(), s) {
				t.Fatalf("output lacks %q:\n%s", s, buf.String())
			}
		}
		buf.Reset()
		if err := res.WriteJSON(&buf); err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"send_size", "reply_size", "reps", "inflight", "rpcs_per_s", "mbytes_per_s", "lat_us_min", "lat_us_p50", "lat_us_p99", "lat_us_max", "failures"} {
			if _, ok := m[k]; !ok {
				t.Fatalf("JSON lacks %q: %s", k, buf.String())
			}
		}
		if m["send_size"].(float64) != float64(sp.Send) {
			t.Fatalf("JSON %s", buf.String())
		}
	}
	// Failures are counted: a rank that does not exist.
	res, err := selftest.Run(ctx, c, selftest.Config{Endpoints: []rpc.Endpoint{{Rank: 7}}, Reps: 5, Inflight: 2})
	if err != nil {
		t.Fatal(err)
	}
	if res.Failures != 5 || !errors.Is(res.FirstError, rpc.ErrNotFound) {
		t.Fatalf("%+v", res)
	}
	// Rates count only RPCs that succeeded.
	if res.RPCsPerSec != 0 || res.MBPerSec != 0 {
		t.Fatalf("all RPCs failed, yet RPCsPerSec %v, MBPerSec %v", res.RPCsPerSec, res.MBPerSec)
	}
}
