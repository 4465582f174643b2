package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/ceph"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/msgr/msgr2"
)

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestPercentileMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 200; trial++ {
		n := 1 + r.IntN(300)
		v := make([]time.Duration, n)
		for i := range v {
			v[i] = time.Duration(r.IntN(1000))
		}
		orig := slices.Clone(v)
		st := summarize(v)
		if !slices.Equal(v, orig) {
			t.Fatal("summarize modified its input")
		}
		s := slices.Clone(v)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		for _, p := range []float64{50, 99} {
			// Reference: the smallest value with at least p% of the
			// values <= it.
			var ref time.Duration
			for _, x := range s {
				le := 0
				for _, y := range s {
					if y <= x {
						le++
					}
				}
				if float64(le) >= p/100*float64(n) {
					ref = x
					break
				}
			}
			got := st.P50
			if p == 99 {
				got = st.P99
			}
			if got != ref {
				t.Fatalf("n=%d p%v = %v, reference %v", n, p, got, ref)
			}
		}
		var sum time.Duration
		for _, x := range s {
			sum += x
		}
		if st.Min != s[0] || st.Max != s[n-1] || st.Avg != sum/time.Duration(n) || st.N != n {
			t.Fatalf("stats %+v for %v", st, s)
		}
	}
	if st := summarize(nil); st != (rttStats{}) {
		t.Errorf("summarize(nil) = %+v", st)
	}
}

func TestBuffersEqual(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	split := func(b []byte) msg.Buffers {
		var out msg.Buffers
		for len(b) > 0 {
			n := r.IntN(len(b) + 1)
			out = append(out, b[:n]) // empty buffers included
			b = b[n:]
		}
		return out
	}
	for trial := 0; trial < 500; trial++ {
		b := make([]byte, r.IntN(64))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		x, y := split(b), split(slices.Clone(b))
		if !buffersEqual(x, y) {
			t.Fatalf("equal contents, split differently, compare unequal: %v %v", x, y)
		}
		if len(b) == 0 {
			continue
		}
		c := slices.Clone(b)
		c[r.IntN(len(c))] ^= 1 << r.IntN(8)
		if buffersEqual(x, split(c)) {
			t.Fatalf("%v and %v compare equal", b, c)
		}
		if buffersEqual(x, split(b[:len(b)-1])) {
			t.Fatalf("a prefix compares equal")
		}
	}
}

func TestRequestDataDiffersByTid(t *testing.T) {
	p := &pingClient{}
	for _, size := range []int{0, 1, 7, 8, 9, 300, 70000} {
		prev := p.requestData(1, size)
		if prev.Len() != size {
			t.Fatalf("size %d: data of %d bytes", size, prev.Len())
		}
		for tid := uint64(2); tid < 600; tid++ {
			d := p.requestData(tid, size)
			if d.Len() != size {
				t.Fatalf("size %d: data of %d bytes", size, d.Len())
			}
			if size > 0 && buffersEqual(d, prev) {
				t.Fatalf("size %d: tids %d and %d have the same data", size, tid-1, tid)
			}
			if !buffersEqual(d, p.requestData(tid, size)) {
				t.Fatalf("size %d: tid %d data not deterministic", size, tid)
			}
			prev = d
		}
	}
}

func TestParseIdentity(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want msg.EntityName
		id   string
		ok   bool
	}{
		{"mon.a", msg.EntityName{Type: msg.EntityMon, Num: 0}, "a", true},
		{"mon.2", msg.EntityName{Type: msg.EntityMon, Num: 2}, "2", true},
		{"osd.3", msg.EntityName{Type: msg.EntityOSD, Num: 3}, "3", true},
		{"osd.x", msg.EntityName{}, "", false},
		{"osd.-1", msg.EntityName{}, "", false},
		{"mon", msg.EntityName{}, "", false},
		{"mon.", msg.EntityName{}, "", false},
		{"any.1", msg.EntityName{}, "", false},
		{"nope.1", msg.EntityName{}, "", false},
	} {
		got, id, err := parseIdentity(tc.in)
		if (err == nil) != tc.ok || got != tc.want || id != tc.id {
			t.Errorf("parseIdentity(%q) = %v, %q, %v; want %v, %q, ok=%v", tc.in, got, id, err, tc.want, tc.id, tc.ok)
		}
	}
}

func TestParseFlagsInterspersed(t *testing.T) {
	e := &env{stdout: io.Discard, stderr: io.Discard}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	n := fs.Int("n", 0, "")
	pos, _, ok := parseFlags(e, fs, []string{"a", "-n", "3", "b", "--", "-n"})
	if !ok || *n != 3 || !slices.Equal(pos, []string{"a", "b", "-n"}) {
		t.Errorf("got %q n=%d ok=%v", pos, *n, ok)
	}
	fs2 := flag.NewFlagSet("t", flag.ContinueOnError)
	fs2.SetOutput(io.Discard)
	if _, code, ok := parseFlags(e, fs2, []string{"-x"}); ok || code != exitUsage {
		t.Errorf("unknown flag: ok=%v code=%d", ok, code)
	}
}

// fakeServer starts a mon-named messenger whose MPing handling is h.
func fakeServer(t *testing.T, h func(req *msg.Message)) string {
	t.Helper()
	m, err := msgr.New(msgr.Config{Name: defaultIdentity(), ZeroNonce: true, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	m.SetDefaultPolicy(msgr.StatelessServer())
	m.AddDispatcherTail(msgr.DispatcherFunc(func(r *msg.Message) bool {
		if r.Header.Type != ceph.MsgPing {
			return false
		}
		h(r)
		return true
	}))
	if err := m.Bind("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Shutdown)
	return m.Addrs()[0].String()
}

func dialTest(t *testing.T, addr string) *pingClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pc, err := dialPing(ctx, addr, quietLog)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pc.Close)
	return pc
}

func runTest(t *testing.T, pc *pingClient, o pingOptions, limit time.Duration) *pingResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	return pc.run(ctx, o)
}

func TestEngineEcho(t *testing.T) {
	before := runtime.NumGoroutine()
	srv, err := startServer(serverConfig{Listen: "tcp://127.0.0.1:0", Name: defaultIdentity(), ID: "a", FSID: randomFSID(), Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pc, err := dialPing(ctx, srv.Addr(), quietLog)
	if err != nil {
		srv.Close()
		t.Fatal(err)
	}
	total := 0
	for _, o := range []pingOptions{
		{Count: 50, Size: 0, Inflight: 1},
		{Count: 50, Size: 5, Inflight: 4},
		{Count: 20, Size: 100 << 10, Inflight: 8},
		{Count: 3, Size: 10, Inflight: 100},
	} {
		var progress []int
		o.Progress = func(done, total int) { progress = append(progress, done) }
		res := pc.run(ctx, o)
		total += o.Count
		if res.Err != nil || res.OK != o.Count || res.Errors() != 0 || len(res.RTTs) != o.Count {
			t.Errorf("%+v: ok %d errors %d err %v", o, res.OK, res.Errors(), res.Err)
		}
		if want := int64(2 * o.Count * o.Size); res.Bytes != want {
			t.Errorf("%+v: bytes %d, want %d", o, res.Bytes, want)
		}
		if len(progress) != o.Count || progress[len(progress)-1] != o.Count {
			t.Errorf("%+v: progress calls %v", o, progress)
		}
		for _, d := range res.RTTs {
			if d <= 0 {
				t.Errorf("%+v: rtt %v", o, d)
			}
		}
		st, err := ceph.ParsePingStatus(res.Status)
		if err != nil || st.Health.Status != "HEALTH_OK" || st.MonStatus.Name != "a" {
			t.Errorf("status %q: %v", res.Status, err)
		}
	}
	if got := srv.Pings(); got != uint64(total) {
		t.Errorf("server answered %d pings, want %d", got, total)
	}
	pc.Close()
	srv.Close()
	// Every goroutine of both messengers has exited.
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond) // polling with a deadline
	}
}

func TestEngineDetectsCorruptData(t *testing.T) {
	addr := fakeServer(t, func(req *msg.Message) {
		r := ceph.PingReply([]byte(`{}`))
		r.Header.Tid = req.Header.Tid
		d := slices.Clone(req.Data.Bytes())
		d[len(d)-1] ^= 0x80
		r.Data = msg.Buffers{d}
		_ = req.Conn.Send(r)
	})
	pc := dialTest(t, addr)
	res := runTest(t, pc, pingOptions{Count: 10, Size: 1000, Inflight: 2}, 30*time.Second)
	if res.Mismatches != 10 || res.OK != 0 || res.Errors() != 10 || res.Mismatch == nil {
		t.Errorf("mismatches %d ok %d errors %d (%v), want 10, 0, 10", res.Mismatches, res.OK, res.Errors(), res.Mismatch)
	}
}

func TestEngineDetectsSwappedReplies(t *testing.T) {
	// Replies carry the right tids but each other's data.
	var mu sync.Mutex
	var held *msg.Message
	addr := fakeServer(t, func(req *msg.Message) {
		mu.Lock()
		defer mu.Unlock()
		if held == nil {
			held = req
			return
		}
		for _, pair := range [][2]*msg.Message{{held, req}, {req, held}} {
			r := ceph.PingReply(nil)
			r.Header.Tid = pair[0].Header.Tid
			r.Data = pair[1].Data
			_ = req.Conn.Send(r)
		}
		held = nil
	})
	pc := dialTest(t, addr)
	res := runTest(t, pc, pingOptions{Count: 8, Size: 64, Inflight: 2}, 30*time.Second)
	if res.Mismatches != 8 || res.Errors() != 8 {
		t.Errorf("mismatches %d errors %d, want 8, 8", res.Mismatches, res.Errors())
	}
}

func TestEngineTidZeroRepliesLikeAMon(t *testing.T) {
	// A Ceph mon answers with a fresh MPing: tid 0, no data.
	addr := fakeServer(t, func(req *msg.Message) {
		_ = req.Conn.Send(ceph.PingReply([]byte(`{"health":{"status":"HEALTH_WARN"}}`)))
	})
	pc := dialTest(t, addr)
	res := runTest(t, pc, pingOptions{Count: 20, Size: 0, Inflight: 4}, 30*time.Second)
	if res.OK != 20 || res.Errors() != 0 || res.Err != nil {
		t.Errorf("ok %d errors %d err %v", res.OK, res.Errors(), res.Err)
	}
	if got := statusSummary(res.Status); got != "HEALTH_WARN" {
		t.Errorf("status summary %q", got)
	}
	// With data, the mon's empty reply is a mismatch.
	res = runTest(t, pc, pingOptions{Count: 2, Size: 16, Inflight: 1}, 30*time.Second)
	if res.Mismatches != 2 {
		t.Errorf("mismatches %d, want 2", res.Mismatches)
	}
}

func TestEngineCountsUnexpectedReplies(t *testing.T) {
	addr := fakeServer(t, func(req *msg.Message) {
		for range 2 {
			r := ceph.PingReply(nil)
			r.Header.Tid = req.Header.Tid
			r.Data = req.Data
			_ = req.Conn.Send(r)
		}
	})
	pc := dialTest(t, addr)
	res := runTest(t, pc, pingOptions{Count: 5, Size: 32, Inflight: 1}, 30*time.Second)
	// The duplicate of reply n arrives before reply n+1.
	if res.OK != 5 || res.Unexpected < 4 || res.Errors() < 4 || res.firstError() == nil {
		t.Errorf("ok %d unexpected %d errors %d", res.OK, res.Unexpected, res.Errors())
	}
}

func TestEngineTimesOut(t *testing.T) {
	addr := fakeServer(t, func(req *msg.Message) {})
	pc := dialTest(t, addr)
	res := runTest(t, pc, pingOptions{Count: 5, Size: 10, Inflight: 2}, 200*time.Millisecond)
	if !errors.Is(res.Err, context.DeadlineExceeded) || res.Unanswered != 5 || res.Sent != 2 || res.Errors() != 5 {
		t.Errorf("err %v unanswered %d sent %d errors %d", res.Err, res.Unanswered, res.Sent, res.Errors())
	}
}

func TestEngineConnectionReset(t *testing.T) {
	addr := fakeServer(t, func(req *msg.Message) {
		if c, ok := req.Conn.(*msgr.Conn); ok {
			c.MarkDown()
		}
	})
	pc := dialTest(t, addr)
	res := runTest(t, pc, pingOptions{Count: 3, Inflight: 1}, 30*time.Second)
	if res.Err == nil || errors.Is(res.Err, context.DeadlineExceeded) || res.OK != 0 || res.Errors() != 3 {
		t.Errorf("err %v ok %d errors %d; want a connection error", res.Err, res.OK, res.Errors())
	}
}

func TestMonStatusJSON(t *testing.T) {
	ea, err := msg.ParseEntityAddr("v2:127.0.0.1:3300/0")
	if err != nil {
		t.Fatal(err)
	}
	fsid := randomFSID()
	b, err := monStatus(serverConfig{Name: defaultIdentity(), ID: "a", FSID: fsid}, ea)
	if err != nil {
		t.Fatal(err)
	}
	st, err := ceph.ParsePingStatus(b)
	if err != nil {
		t.Fatal(err)
	}
	if st.Health.Status != "HEALTH_OK" || st.MonStatus.Name != "a" || st.MonStatus.State != "leader" ||
		st.MonStatus.Monmap.FSID != fsid.String() || !slices.Equal(st.MonStatus.Quorum, []int{0}) {
		t.Errorf("status %+v", st)
	}
	if _, err := ceph.ParseFSID(fsid.String()); err != nil || fsid.String()[14] != '4' {
		t.Errorf("random fsid %s is not a version 4 UUID", fsid)
	}
}

// TestDataCRC checks the ping engine's CRC of its data against
// msgr2.SegmentCRC over the bytes, across sizes and tids (every offset
// of the pattern), and that the echo check compares CRCs when msgr
// recorded one and bytes otherwise.
func TestDataCRC(t *testing.T) {
	p := &pingClient{}
	for _, size := range []int{0, 5, 8, 9, 300, 70000, 1 << 20} {
		for tid := uint64(1); tid < 2*patternPeriod+3; tid += 7 {
			d := p.requestData(tid, size)
			if got, want := p.dataCRC(tid, size), msgr2.SegmentCRC(d); got != want {
				t.Fatalf("size %d tid %d: crc %#08x, want %#08x", size, tid, got, want)
			}
		}
	}
	d := p.requestData(3, 70000)
	pp := pendingPing{data: d, crc: p.dataCRC(3, 70000), crcSet: true}
	other := p.requestData(4, 70000)
	r := &msg.Message{Data: other}
	if pp.echoed(r) {
		t.Fatal("another ping's data echoed without a CRC")
	}
	r.SetReceivedDataCRC(msgr2.SegmentCRC(other))
	if pp.echoed(r) {
		t.Fatal("another ping's data echoed with its CRC")
	}
	r = &msg.Message{Data: d}
	r.SetReceivedDataCRC(msgr2.SegmentCRC(d))
	if !pp.echoed(r) {
		t.Fatal("the echo with its CRC not recognised")
	}
	r = &msg.Message{Data: d}
	if !pp.echoed(r) {
		t.Fatal("the echo without a CRC not recognised")
	}
}
