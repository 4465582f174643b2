package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/ferrymsg/ferry/ceph"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
)

// maxPingSize bounds --size: the messenger's default segment limit.
const maxPingSize = 256 << 20

// runPing is `ferry ping`: Ceph's simple_client.
func runPing(ctx context.Context, e *env, args []string) int {
	fs := newFlagSet(e, "ping")
	count := fs.Int("count", 10, "number of pings to send")
	size := fs.Int("size", 0, "bytes of data in each ping's data segment; the peer must echo them (use 0 for a Ceph mon)")
	inflight := fs.Int("inflight", 1, "maximum pings outstanding at once on the connection")
	asJSON := fs.Bool("json", false, "print one JSON object on stdout instead of text")
	timeout := fs.Duration("timeout", 30*time.Second, "overall time limit, connection setup included")
	verbose := fs.Bool("verbose", false, "log debug messages")
	pos, code, ok := parseFlags(e, fs, args)
	if !ok {
		return code
	}
	switch {
	case len(pos) != 1:
		return usageError(e, fs, "want exactly one address (v2:IP:PORT/NONCE or tcp://IP:PORT), got %d arguments", len(pos))
	case *count < 1:
		return usageError(e, fs, "--count must be at least 1")
	case *size < 0 || *size > maxPingSize:
		return usageError(e, fs, "--size must be between 0 and %d", maxPingSize)
	case *inflight < 1:
		return usageError(e, fs, "--inflight must be at least 1")
	case *timeout <= 0:
		return usageError(e, fs, "--timeout must be positive")
	}
	addr := pos[0]
	opts := pingOptions{Count: *count, Size: *size, Inflight: *inflight}

	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	log := newLogger(e, *verbose)
	pc, err := dialPing(ctx, addr, log)
	if err != nil {
		res := &pingResult{Requested: opts.Count, Err: err}
		if *asJSON {
			writeJSON(e, newPingReport(res, opts, addr, ""))
		} else {
			fmt.Fprintf(e.stderr, "ferry ping: %v\n", err)
		}
		return exitError
	}
	defer pc.Close()
	peer := pc.conn.PeerName().String()
	if !*asJSON {
		fmt.Fprintf(e.stdout, "PING %s (%s): %d pings, %d data bytes each, %d in flight\n", addr, peer, opts.Count, opts.Size, opts.Inflight)
	}
	res := pc.run(ctx, opts)
	rep := newPingReport(res, opts, addr, peer)
	if *asJSON {
		writeJSON(e, rep)
	} else {
		printPingText(e, res, rep)
	}
	if rep.Errors > 0 || res.Err != nil {
		return exitError
	}
	return exitOK
}

// pingReport is the JSON form of a ping run (one row of selftest too).
type pingReport struct {
	Peer       string  `json:"peer,omitempty"`
	Addr       string  `json:"addr,omitempty"`
	Size       int     `json:"size"`
	Inflight   int     `json:"inflight"`
	Requested  int     `json:"requested"`
	Count      int     `json:"count"`  // pings answered correctly
	Errors     int     `json:"errors"` // pings not answered correctly, plus unexpected replies
	Mismatches int     `json:"mismatches"`
	Unanswered int     `json:"unanswered"`
	Unexpected int     `json:"unexpected"`
	RTTMin     float64 `json:"rtt_us_min"`
	RTTAvg     float64 `json:"rtt_us_avg"`
	RTTP50     float64 `json:"rtt_us_p50"`
	RTTP99     float64 `json:"rtt_us_p99"`
	RTTMax     float64 `json:"rtt_us_max"`
	MsgsPerS   float64 `json:"msgs_per_s"`   // round trips per second
	MBytesPerS float64 `json:"mbytes_per_s"` // data payload sent + received, 10^6 B/s
	Bytes      int64   `json:"bytes"`        // data payload sent + received
	ElapsedS   float64 `json:"elapsed_s"`
	Status     any     `json:"status,omitempty"` // the first reply's status: raw JSON, or a string
	Error      string  `json:"error,omitempty"`
}

func newPingReport(res *pingResult, o pingOptions, addr, peer string) *pingReport {
	st := summarize(res.RTTs)
	r := &pingReport{
		Peer:       peer,
		Addr:       addr,
		Size:       o.Size,
		Inflight:   o.Inflight,
		Requested:  res.Requested,
		Count:      res.OK,
		Errors:     res.Errors(),
		Mismatches: res.Mismatches,
		Unanswered: res.Unanswered,
		Unexpected: res.Unexpected,
		RTTMin:     micros(st.Min),
		RTTAvg:     micros(st.Avg),
		RTTP50:     micros(st.P50),
		RTTP99:     micros(st.P99),
		RTTMax:     micros(st.Max),
		MsgsPerS:   round2(rate(float64(res.OK), res.Elapsed)),
		MBytesPerS: round2(rate(float64(res.Bytes)/1e6, res.Elapsed)),
		Bytes:      res.Bytes,
		ElapsedS:   res.Elapsed.Seconds(),
	}
	if res.Status != nil {
		if json.Valid(res.Status) {
			r.Status = json.RawMessage(res.Status)
		} else {
			r.Status = string(res.Status)
		}
	}
	if err := res.firstError(); err != nil {
		r.Error = err.Error()
	}
	return r
}

func writeJSON(e *env, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		fmt.Fprintf(e.stderr, "ferry: encoding JSON: %v\n", err)
		return
	}
	b = append(b, '\n')
	_, _ = e.stdout.Write(b)
}

func printPingText(e *env, res *pingResult, r *pingReport) {
	w := e.stdout
	if res.Status != nil {
		fmt.Fprintf(w, "status: %s\n", statusSummary(res.Status))
	}
	fmt.Fprintf(w, "%d/%d replies, %d errors, %.3f s\n", r.Count, r.Requested, r.Errors, r.ElapsedS)
	if r.Count > 0 {
		fmt.Fprintf(w, "rtt min/avg/p50/p99/max = %.1f/%.1f/%.1f/%.1f/%.1f µs\n", r.RTTMin, r.RTTAvg, r.RTTP50, r.RTTP99, r.RTTMax)
		fmt.Fprintf(w, "%.1f msgs/s (round trips), %.2f MB/s (data payload sent + received, 1 MB = 10^6 B)\n", r.MsgsPerS, r.MBytesPerS)
	}
	if r.Error != "" {
		fmt.Fprintf(e.stderr, "ferry ping: %s\n", r.Error)
	}
	if r.Mismatches > 0 || r.Unexpected > 0 || r.Unanswered > 0 {
		fmt.Fprintf(e.stderr, "ferry ping: %d data mismatches, %d unanswered, %d unexpected replies\n", r.Mismatches, r.Unanswered, r.Unexpected)
	}
}

// statusSummary returns a one-line description of a mon's ping status.
func statusSummary(status []byte) string {
	if s, err := ceph.ParsePingStatus(status); err == nil && s.Health.Status != "" {
		out := s.Health.Status
		if s.MonStatus.Name != "" {
			out += fmt.Sprintf(" (mon %s, rank %d, %s)", s.MonStatus.Name, s.MonStatus.Rank, s.MonStatus.State)
		}
		return out
	}
	line := strings.Join(strings.Fields(string(status)), " ")
	if len(line) > 200 {
		line = line[:200] + "..."
	}
	return line
}

// pingOptions configures one run of the ping engine.
type pingOptions struct {
	Count    int // pings to send, at least 1
	Size     int // data segment bytes per ping
	Inflight int // maximum outstanding pings, at least 1
	// Progress, if set, is called on the engine's goroutine after each
	// reply with the number of pings answered so far.
	Progress func(done, total int)
}

// pingResult is the outcome of one run.
type pingResult struct {
	Requested  int
	Sent       int
	OK         int // replies whose data matched
	Mismatches int // replies whose data did not match
	Unanswered int // pings with no reply (not sent, or the run stopped)
	Unexpected int // replies that matched no outstanding ping
	RTTs       []time.Duration
	Elapsed    time.Duration // first send to last reply (or to the stop)
	Bytes      int64         // data segment bytes sent and received
	Status     []byte        // status string of the first reply with a front
	Err        error         // why the run stopped early
	Mismatch   error         // the first data mismatch
}

// Errors returns the number of pings not answered correctly plus the
// unexpected replies.
func (r *pingResult) Errors() int { return r.Requested - r.OK + r.Unexpected }

func (r *pingResult) firstError() error {
	if r.Err != nil {
		return r.Err
	}
	if r.Mismatch != nil {
		return r.Mismatch
	}
	if r.Unexpected > 0 {
		return fmt.Errorf("%d unexpected replies", r.Unexpected)
	}
	return nil
}

// pingClient is a lossy client messenger with one connection to a peer,
// and the dispatcher that hands MPing replies to the engine. run must not
// be called concurrently.
type pingClient struct {
	m       *msgr.Messenger
	conn    *msgr.Conn
	replies chan *msg.Message
	done    chan struct{} // closed by Close: the dispatcher stops waiting
	once    sync.Once

	nextTid uint64 // last tid used; tids are unique across runs
	pattern []byte // data pattern, see requestData
}

// replyQueueLen bounds the replies dispatched but not yet taken by the
// engine; the dispatcher blocks beyond it, which stalls the messenger's
// dispatch goroutine until the engine catches up.
const replyQueueLen = 1024

// dialPing starts a client messenger, connects to addr and waits for the
// handshake.
func dialPing(ctx context.Context, addr string, log *slog.Logger) (*pingClient, error) {
	m, err := msgr.New(msgr.Config{Logger: log})
	if err != nil {
		return nil, err
	}
	m.SetDefaultPolicy(msgr.LossyClient())
	p := &pingClient{m: m, replies: make(chan *msg.Message, replyQueueLen), done: make(chan struct{})}
	m.AddDispatcherTail(p)
	if err := m.Start(); err != nil {
		p.Close()
		return nil, err
	}
	c, err := m.Connect(addr)
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("connect %s: %w", addr, err)
	}
	if err := c.Ready(ctx); err != nil {
		p.Close()
		return nil, fmt.Errorf("connect %s: %w", addr, err)
	}
	p.conn = c
	return p, nil
}

// Dispatch takes MPing replies; it implements msgr.Dispatcher.
func (p *pingClient) Dispatch(m *msg.Message) bool {
	if m.Header.Type != ceph.MsgPing {
		return false
	}
	select {
	case p.replies <- m:
	case <-p.done:
	}
	return true
}

// Close shuts the messenger down. It is idempotent.
func (p *pingClient) Close() {
	p.once.Do(func() {
		close(p.done)
		p.m.Shutdown()
	})
}

// patternPeriod is the period of the data pattern: a prime, so that the
// pattern shifted by any offset below it differs from itself everywhere.
const patternPeriod = 251

// requestData returns the data segment of ping tid: the tid (le64,
// truncated to size) followed by the repeating pattern 0..250 starting at
// tid mod 251. A reply meant for another ping, or shifted, or corrupted,
// does not compare equal. The pattern is shared and never written, so a
// request costs one small allocation whatever its size.
func (p *pingClient) requestData(tid uint64, size int) msg.Buffers {
	if size == 0 {
		return nil
	}
	var le [8]byte
	binary.LittleEndian.PutUint64(le[:], tid)
	h := make([]byte, min(size, len(le)))
	copy(h, le[:])
	if size <= len(le) {
		return msg.Buffers{h}
	}
	rest := size - len(le)
	if len(p.pattern) < rest+patternPeriod {
		p.pattern = make([]byte, rest+patternPeriod)
		for i := range p.pattern {
			p.pattern[i] = byte(i % patternPeriod)
		}
	}
	off := int(tid % patternPeriod)
	return msg.Buffers{h, p.pattern[off : off+rest : off+rest]}
}

// buffersEqual reports whether a and b hold the same bytes, however they
// are split into buffers.
func buffersEqual(a, b msg.Buffers) bool {
	if a.Len() != b.Len() {
		return false
	}
	var x, y []byte
	for {
		for len(x) == 0 && len(a) > 0 {
			x, a = a[0], a[1:]
		}
		for len(y) == 0 && len(b) > 0 {
			y, b = b[0], b[1:]
		}
		if len(x) == 0 || len(y) == 0 {
			return len(x) == len(y)
		}
		n := min(len(x), len(y))
		if !bytes.Equal(x[:n], y[:n]) {
			return false
		}
		x, y = x[n:], y[n:]
	}
}

type pendingPing struct {
	sent time.Time
	data msg.Buffers
}

// run is the ping engine: it sends o.Count pings with at most o.Inflight
// outstanding, matches each reply to its ping by tid (a reply with tid 0,
// as a Ceph mon sends, goes to the oldest outstanding ping), checks that
// the reply's data equals the request's, and records the round-trip time
// from just before Send to the reply's dispatch. It stops early when ctx
// ends or the connection closes.
func (p *pingClient) run(ctx context.Context, o pingOptions) *pingResult {
	res := &pingResult{Requested: o.Count, RTTs: make([]time.Duration, 0, o.Count)}
	pending := make(map[uint64]pendingPing, o.Inflight)
	var order []uint64 // tids in send order, for replies without a tid
	head := 0
	answered := 0

	handle := func(r *msg.Message) {
		defer r.Done()
		tid := r.Header.Tid
		pp, ok := pending[tid]
		if !ok && tid == 0 {
			for head < len(order) && !ok {
				tid = order[head]
				head++
				pp, ok = pending[tid]
			}
		}
		if !ok {
			res.Unexpected++
			return
		}
		delete(pending, tid)
		at := r.DispatchStamp
		if at.IsZero() {
			at = time.Now()
		}
		res.Bytes += int64(r.Data.Len())
		if res.Status == nil && r.Front.Len() > 0 {
			if st, err := ceph.DecodePingStatus(r.Front.Bytes()); err == nil && st != nil {
				res.Status = bytes.Clone(st)
			}
		}
		answered++
		if !buffersEqual(r.Data, pp.data) {
			res.Mismatches++
			if res.Mismatch == nil {
				res.Mismatch = fmt.Errorf("reply to ping %d: data differs from the request (%d bytes sent, %d received)", tid, pp.data.Len(), r.Data.Len())
			}
		} else {
			res.OK++
			res.RTTs = append(res.RTTs, at.Sub(pp.sent))
		}
		if o.Progress != nil {
			o.Progress(answered, o.Count)
		}
	}

	start := time.Now()
	conn := p.conn
loop:
	for answered < o.Count {
		for res.Sent < o.Count && len(pending) < o.Inflight {
			p.nextTid++
			tid := p.nextTid
			m := (&ceph.Ping{}).Marshal()
			m.Header.Tid = tid
			data := p.requestData(tid, o.Size)
			m.Data = data
			now := time.Now()
			if err := conn.Send(m); err != nil {
				res.Err = fmt.Errorf("send ping %d: %w", tid, err)
				break loop
			}
			pending[tid] = pendingPing{sent: now, data: data}
			order = append(order, tid)
			res.Sent++
			res.Bytes += int64(o.Size)
		}
		select {
		case r := <-p.replies:
			handle(r)
		case <-conn.Done():
			// Take the replies dispatched before the connection closed.
			for answered < o.Count {
				select {
				case r := <-p.replies:
					handle(r)
					continue
				default:
				}
				break
			}
			if answered < o.Count {
				res.Err = fmt.Errorf("connection closed with %d pings outstanding: %w", len(pending), connErr(conn))
			}
			break loop
		case <-ctx.Done():
			res.Err = fmt.Errorf("%d of %d pings unanswered: %w", o.Count-answered, o.Count, ctx.Err())
			break loop
		}
	}
	res.Elapsed = time.Since(start)
	res.Unanswered = o.Count - answered
	return res
}

// connErr returns why c closed.
func connErr(c *msgr.Conn) error {
	if err := c.Err(); err != nil {
		return err
	}
	return errors.New("connection reset")
}
