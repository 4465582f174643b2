// Package selftest is CaRT's self-test client (src/utils/self_test): it
// sends rpc.OpSelfTest requests of a given size, asking for replies of a
// given size, to a set of endpoints with a bounded number in flight, and
// measures the RPC rate, the bandwidth and the latency distribution. Every
// rpc instance serves the self-test protocol, so any ferry rank (or
// `ferry serve`) is a target.
package selftest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ferrymsg/ferry/rpc"
)

// Errors.
var (
	// ErrBadSizes: a --sizes list could not be parsed.
	ErrBadSizes = errors.New("selftest: bad size list")
	// ErrConfig: a Config is not usable.
	ErrConfig = errors.New("selftest: bad config")
)

// SizePair is one message-size pair: the bytes each request sends and the
// bytes each reply carries, each inline or, with CaRT's "b" prefix, by
// bulk transfer (the target GETs the send buffer and PUTs the reply).
type SizePair struct {
	Send, Reply         int
	SendBulk, ReplyBulk bool
}

func (p SizePair) String() string {
	return fmt.Sprintf("%s-%s B", sizeStr(p.Send, p.SendBulk), sizeStr(p.Reply, p.ReplyBulk))
}

func sizeStr(n int, bulk bool) string {
	if bulk {
		return fmt.Sprintf("b%d", n)
	}
	return strconv.Itoa(n)
}

// DefaultSizes are `ferry selftest`'s default pairs.
const DefaultSizes = "0 0,4096 0,0 4096,1048576 0,0 1048576,b1048576 0,0 b1048576"

// ParseSizes parses CaRT's size list: pairs "SEND REPLY" separated by
// commas, optionally in parentheses ("(0 0),(4096 0)"); a size may carry
// CaRT's "i" (iov) or "e" (empty) prefix, both meaning an inline payload
// here, or "b" (bulk): the payload moves by bulk transfer.
func ParseSizes(s string) ([]SizePair, error) {
	var out []SizePair
	for _, item := range strings.Split(s, ",") {
		item = strings.Trim(strings.TrimSpace(item), "()")
		f := strings.Fields(item)
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("%w: %q is not \"SEND REPLY\"", ErrBadSizes, item)
		}
		var p [2]int
		var bulk [2]bool
		for i, v := range f {
			switch {
			case strings.HasPrefix(v, "b"):
				bulk[i] = true
				v = v[1:]
			case strings.HasPrefix(v, "i"), strings.HasPrefix(v, "e"):
				v = v[1:]
			}
			n, err := parseSize(v)
			if err != nil || n < 0 || n > rpc.MaxPayload-4 {
				return nil, fmt.Errorf("%w: size %q (0 to %d)", ErrBadSizes, v, rpc.MaxPayload-4)
			}
			p[i] = n
		}
		out = append(out, SizePair{Send: p[0], Reply: p[1], SendBulk: bulk[0], ReplyBulk: bulk[1]})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrBadSizes)
	}
	return out, nil
}

// parseSize parses a byte count with an optional K, M (binary) suffix.
func parseSize(v string) (int, error) {
	mul := 1
	switch {
	case strings.HasSuffix(v, "K"), strings.HasSuffix(v, "k"):
		mul, v = 1<<10, v[:len(v)-1]
	case strings.HasSuffix(v, "M"), strings.HasSuffix(v, "m"):
		mul, v = 1<<20, v[:len(v)-1]
	}
	n, err := strconv.Atoi(v)
	return n * mul, err
}

// Config is one self-test run.
type Config struct {
	// Endpoints are the targets, used round-robin.
	Endpoints []rpc.Endpoint
	// Sizes is the message-size pair.
	Sizes SizePair
	// Reps is the number of RPCs (default 10000).
	Reps int
	// Inflight is the number of RPCs in flight at once (default 16).
	Inflight int
	// Timeout is each RPC's timeout (default the context's).
	Timeout time.Duration
	// Progress, when set, is called from the run's goroutine with the RPCs
	// done so far, at most every 100 ms and at the end.
	Progress func(done, total int)
}

// Latencies summarise the per-RPC latencies (send to completion).
type Latencies struct {
	Min, P25, P50, P75, P90, P99, Max, Avg, StdDev time.Duration
}

// EndpointResult is one endpoint's share.
type EndpointResult struct {
	Endpoint rpc.Endpoint
	RPCs     int
	Median   time.Duration
}

// Result is the outcome of Run.
type Result struct {
	Sizes       SizePair
	Reps        int
	Inflight    int
	Duration    time.Duration
	RPCsPerSec  float64 // RPCs that succeeded, per second
	MBPerSec    float64 // (send + reply) bytes of RPCs that succeeded per second, in MiB/s as CaRT's "MB/sec"
	Latency     Latencies
	Failures    int
	FirstError  error
	PerEndpoint []EndpointResult
}

// slot is one request in flight; its pointer is the request's Arg.
type slot struct {
	start time.Time
	ep    int
	out   replyLen
	in    *rpc.SelfTestInput
}

// replyLen is the self-test's output: it counts the reply's bytes without
// keeping them, so reply buffers go straight back to the messenger's pool.
type replyLen int

// UnmarshalBinary counts a front-segment payload.
func (n *replyLen) UnmarshalBinary(b []byte) error { *n = replyLen(len(b)); return nil }

// ReceiveData counts the data segment.
func (n *replyLen) ReceiveData(data [][]byte) error {
	for _, p := range data {
		*n += replyLen(len(p))
	}
	return nil
}

// PeeksData marks replyLen as not keeping the data (rpc.DataPeeker).
func (n *replyLen) PeeksData() {}

// Run runs the self-test on c, which must not have Auto progress: Run
// progresses it itself. It returns an error only if the test could not be
// run; failed RPCs are counted in the Result.
func Run(ctx context.Context, c *rpc.Context, cfg Config) (*Result, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, fmt.Errorf("%w: no endpoints", ErrConfig)
	}
	if cfg.Reps <= 0 {
		cfg.Reps = 10000
	}
	if cfg.Inflight <= 0 {
		cfg.Inflight = 16
	}
	cfg.Inflight = min(cfg.Inflight, cfg.Reps)
	payload := make([]byte, cfg.Sizes.Send)
	for i := range payload {
		payload[i] = byte(i)
	}
	in := &rpc.SelfTestInput{ReplySize: uint32(cfg.Sizes.Reply), Payload: payload}
	var bulks []*rpc.Bulk
	defer func() {
		for _, b := range bulks {
			b.Free()
		}
	}()
	register := func(b []byte, perm rpc.BulkPerm) (*rpc.BulkHandle, error) {
		bk, err := c.Instance().NewBulk([][]byte{b}, perm)
		if err != nil {
			return nil, err
		}
		bulks = append(bulks, bk)
		h := bk.Handle()
		return &h, nil
	}
	if cfg.Sizes.SendBulk {
		h, err := register(payload, rpc.BulkRO) // shared: only read
		if err != nil {
			return nil, err
		}
		in.SendBulk, in.Payload = h, nil
	}
	// newIn gives each slot its own input: a bulk reply needs a buffer
	// per request in flight.
	newIn := func() (*rpc.SelfTestInput, error) {
		if !cfg.Sizes.ReplyBulk {
			return in, nil
		}
		h, err := register(make([]byte, cfg.Sizes.Reply), rpc.BulkWO)
		if err != nil {
			return nil, err
		}
		si := *in
		si.ReplyBulk = h
		return &si, nil
	}
	wantReply := cfg.Sizes.Reply
	if cfg.Sizes.ReplyBulk {
		wantReply = 0 // the reply itself is empty
	}
	lat := make([]time.Duration, 0, cfg.Reps)
	epLat := make([][]time.Duration, len(cfg.Endpoints))
	res := &Result{Sizes: cfg.Sizes, Reps: cfg.Reps, Inflight: cfg.Inflight}
	sent, done := 0, 0
	var lastProgress time.Time
	var sendErr error

	var cb rpc.Callback
	send := func(s *slot) {
		s.ep = sent % len(cfg.Endpoints)
		s.start = time.Now()
		sent++
		_, err := c.Send(rpc.Request{
			Endpoint: cfg.Endpoints[s.ep], Opcode: rpc.OpSelfTest, In: s.in, Out: &s.out,
			Timeout: cfg.Timeout, Arg: s,
		}, cb)
		if err != nil {
			sendErr = err
		}
	}
	cb = func(cp rpc.Completion) {
		s := cp.Request.Arg.(*slot)
		d := time.Since(s.start)
		done++
		err := cp.Err
		if err == nil && int(s.out) != wantReply {
			err = fmt.Errorf("selftest: reply of %d bytes, want %d", int(s.out), wantReply)
		}
		s.out = 0
		if err != nil {
			res.Failures++
			if res.FirstError == nil {
				res.FirstError = err
			}
		} else {
			lat = append(lat, d)
			epLat[s.ep] = append(epLat[s.ep], d)
		}
		if cfg.Progress != nil && (done == cfg.Reps || time.Since(lastProgress) >= 100*time.Millisecond) {
			lastProgress = time.Now()
			cfg.Progress(done, cfg.Reps)
		}
		if sent < cfg.Reps && sendErr == nil {
			send(s)
		}
	}
	start := time.Now()
	for range cfg.Inflight {
		si, err := newIn()
		if err != nil {
			return nil, err
		}
		send(&slot{in: si})
		if sendErr != nil {
			return nil, sendErr
		}
	}
	err := c.ProgressUntil(ctx, func() bool { return done == sent && (sent == cfg.Reps || sendErr != nil) })
	res.Duration = time.Since(start)
	if err != nil {
		return nil, err
	}
	if sendErr != nil {
		return nil, sendErr
	}
	// Rates count the RPCs that succeeded: failed ones moved no bytes
	// (a run whose RPCs all fail has a rate of 0, not the speed at which
	// they failed).
	if secs := res.Duration.Seconds(); secs > 0 {
		res.RPCsPerSec = float64(len(lat)) / secs
		res.MBPerSec = res.RPCsPerSec * float64(cfg.Sizes.Send+cfg.Sizes.Reply) / (1 << 20)
	}
	res.Latency = summarize(lat)
	for i, l := range epLat {
		res.PerEndpoint = append(res.PerEndpoint, EndpointResult{Endpoint: cfg.Endpoints[i], RPCs: len(l), Median: summarize(l).P50})
	}
	return res, nil
}

// summarize computes the latency statistics; it sorts d.
func summarize(d []time.Duration) Latencies {
	if len(d) == 0 {
		return Latencies{}
	}
	slices.Sort(d)
	var sum float64
	for _, v := range d {
		sum += float64(v)
	}
	avg := sum / float64(len(d))
	var sq float64
	for _, v := range d {
		x := float64(v) - avg
		sq += x * x
	}
	q := func(p float64) time.Duration { // nearest rank
		r := int(math.Ceil(p / 100 * float64(len(d))))
		return d[min(max(r, 1), len(d))-1]
	}
	return Latencies{
		Min: d[0], P25: q(25), P50: q(50), P75: q(75), P90: q(90), P99: q(99), Max: d[len(d)-1],
		Avg: time.Duration(avg), StdDev: time.Duration(math.Sqrt(sq / float64(len(d)))),
	}
}

func us(d time.Duration) float64 { return math.Round(float64(d)/100) / 10 }

// Format writes r as CaRT's self_test prints it.
func (r *Result) Format(w io.Writer) {
	fmt.Fprintf(w, "##################################################\n")
	fmt.Fprintf(w, "Results for message size (%s) (max_inflight_rpcs = %d):\n\n", r.Sizes, r.Inflight)
	fmt.Fprintf(w, "\tRPC Bandwidth (MB/sec): %.2f\n", r.MBPerSec)
	fmt.Fprintf(w, "\tRPC Throughput (RPCs/sec): %.0f\n", r.RPCsPerSec)
	fmt.Fprintf(w, "\tRPC Latencies (us):\n")
	l := r.Latency
	for _, row := range []struct {
		name string
		d    time.Duration
	}{{"Min    ", l.Min}, {"25th  %", l.P25}, {"Median ", l.P50}, {"75th  %", l.P75}, {"90th  %", l.P90}, {"99th  %", l.P99}, {"Max    ", l.Max}, {"Average", l.Avg}} {
		fmt.Fprintf(w, "\t\t%s: %.1f\n", row.name, us(row.d))
	}
	fmt.Fprintf(w, "\t\tStd Dev: %.2f\n", us(l.StdDev))
	fmt.Fprintf(w, "\tRPC Failures: %d\n", r.Failures)
	if r.FirstError != nil {
		fmt.Fprintf(w, "\t\tfirst: %v\n", r.FirstError)
	}
	fmt.Fprintf(w, "\n\tEndpoint results (rank:tag - Median Latency (us)):\n")
	for _, e := range r.PerEndpoint {
		fmt.Fprintf(w, "\t\t%d:%d - %.1f\n", e.Endpoint.Rank, e.Endpoint.Tag, us(e.Median))
	}
	fmt.Fprintln(w)
}

// JSON is the one-line JSON form of a Result.
type JSON struct {
	SendSize    int     `json:"send_size"`
	ReplySize   int     `json:"reply_size"`
	SendBulk    bool    `json:"send_bulk,omitempty"`
	ReplyBulk   bool    `json:"reply_bulk,omitempty"`
	Reps        int     `json:"reps"`
	Inflight    int     `json:"inflight"`
	Endpoints   int     `json:"endpoints"`
	Seconds     float64 `json:"seconds"`
	RPCsPerSec  float64 `json:"rpcs_per_s"`
	MBytesPerS  float64 `json:"mbytes_per_s"`
	LatUsMin    float64 `json:"lat_us_min"`
	LatUsP25    float64 `json:"lat_us_p25"`
	LatUsP50    float64 `json:"lat_us_p50"`
	LatUsP75    float64 `json:"lat_us_p75"`
	LatUsP90    float64 `json:"lat_us_p90"`
	LatUsP99    float64 `json:"lat_us_p99"`
	LatUsMax    float64 `json:"lat_us_max"`
	LatUsAvg    float64 `json:"lat_us_avg"`
	LatUsStdDev float64 `json:"lat_us_stddev"`
	Failures    int     `json:"failures"`
	Error       string  `json:"error,omitempty"`
}

// JSON returns r in its JSON form.
func (r *Result) JSON() JSON {
	l := r.Latency
	j := JSON{
		SendSize: r.Sizes.Send, ReplySize: r.Sizes.Reply, SendBulk: r.Sizes.SendBulk, ReplyBulk: r.Sizes.ReplyBulk,
		Reps: r.Reps, Inflight: r.Inflight,
		Endpoints: len(r.PerEndpoint), Seconds: math.Round(r.Duration.Seconds()*1e6) / 1e6,
		RPCsPerSec: math.Round(r.RPCsPerSec*100) / 100, MBytesPerS: math.Round(r.MBPerSec*100) / 100,
		LatUsMin: us(l.Min), LatUsP25: us(l.P25), LatUsP50: us(l.P50), LatUsP75: us(l.P75),
		LatUsP90: us(l.P90), LatUsP99: us(l.P99), LatUsMax: us(l.Max), LatUsAvg: us(l.Avg),
		LatUsStdDev: us(l.StdDev), Failures: r.Failures,
	}
	if r.FirstError != nil {
		j.Error = r.FirstError.Error()
	}
	return j
}

// WriteJSON writes r as one line of JSON.
func (r *Result) WriteJSON(w io.Writer) error {
	b, err := json.Marshal(r.JSON())
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// LocalGroup is a group of ranks in this process, serving over loopback
// TCP (each with one context, tag 0, Auto progress), and a client that
// knows them all.
type LocalGroup struct {
	Ranks  []*rpc.Instance
	Client *rpc.Instance
}

// StartLocalGroup starts n ranks on 127.0.0.1 and a client instance whose
// group holds them.
func StartLocalGroup(n int, log *slog.Logger) (*LocalGroup, error) {
	return StartLocalGroupOpts(n, rpc.Options{Logger: log})
}

// StartLocalGroupOpts is StartLocalGroup with o as the options of every
// instance (Listen and Rank are set for each rank).
func StartLocalGroupOpts(n int, o rpc.Options) (*LocalGroup, error) {
	if n <= 0 {
		return nil, fmt.Errorf("%w: %d ranks", ErrConfig, n)
	}
	g := &LocalGroup{}
	fail := func(err error) (*LocalGroup, error) {
		g.Close()
		return nil, err
	}
	for i := range n {
		ro := o
		ro.Listen, ro.Rank = "tcp://127.0.0.1:0", uint32(i)
		in, err := rpc.New(ro)
		if err != nil {
			return fail(err)
		}
		g.Ranks = append(g.Ranks, in)
		if _, err := in.NewContext(rpc.ContextOptions{Auto: true}); err != nil {
			return fail(err)
		}
	}
	cli, err := rpc.New(o)
	if err != nil {
		return fail(err)
	}
	g.Client = cli
	for _, r := range g.Ranks {
		if err := cli.Group().Add(r.Rank(), r.URI()); err != nil {
			return fail(err)
		}
	}
	return g, nil
}

// Endpoints returns tag 0 of every rank.
func (g *LocalGroup) Endpoints() []rpc.Endpoint {
	out := make([]rpc.Endpoint, len(g.Ranks))
	for i, r := range g.Ranks {
		out[i] = rpc.Endpoint{Rank: r.Rank()}
	}
	return out
}

// Close stops the client and the ranks.
func (g *LocalGroup) Close() {
	if g.Client != nil {
		g.Client.Close()
	}
	for _, r := range g.Ranks {
		r.Close()
	}
}

// WriteSummary writes one table row per result: the size pair, the RPC
// rate, the bandwidth, latency percentiles and failures.
func WriteSummary(w io.Writer, rs []*Result) {
	fmt.Fprintf(w, "Summary\n")
	fmt.Fprintf(w, "%-22s %10s %10s %10s %10s %10s %8s\n", "size (send-reply)", "RPCs/s", "MB/s", "p50 us", "p99 us", "max us", "failures")
	for _, r := range rs {
		l := r.Latency
		fmt.Fprintf(w, "%-22s %10.0f %10.2f %10.1f %10.1f %10.1f %8d\n", r.Sizes, r.RPCsPerSec, r.MBPerSec, us(l.P50), us(l.P99), us(l.Max), r.Failures)
	}
}
