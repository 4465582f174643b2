package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/ferrymsg/ferry/auth/cephx"
	"github.com/ferrymsg/ferry/ceph"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/msgr/msgr2"
)

// maxPingSize bounds --size: the messenger's default segment limit.
const maxPingSize = 256 << 20

// runPing is `ferry ping`: Ceph's simple_client.
func runPing(ctx context.Context, e *env, args []string) int {
	fs := newFlagSet(e, "ping")
	count := fs.Int("count", 10, "number of pings to send")
	size := newSizeFlag(fs, "size", 0, "`BYTES` of data in each ping's data segment, with an optional K or M suffix (1M is 1048576); the peer must echo them (use 0 for a Ceph mon)")
	inflight := fs.Int("inflight", 1, "maximum pings outstanding at once on the connection")
	interval := fs.Duration("interval", 0, "pace the pings to one per interval on average (0: as fast as the window allows); a late start is caught up by at most --inflight pings at once")
	verify := fs.Bool("verify", false, "tag each ping's data with its own counter (--size is raised to 8) and check the echoes: report lost, duplicated and reordered pings; ride out connection resets whatever the policy")
	asJSON := fs.Bool("json", false, "print one JSON object on stdout instead of text")
	timeout := fs.Duration("timeout", 30*time.Second, "overall time limit, connection setup included")
	warmup := fs.Duration("warmup", 0, "ping for this long first, at the same size and depth, and leave those pings out of the results (on a VM the first 100-200 ms of a run can be several times slower than the rest)")
	verbose := fs.Bool("verbose", false, "log debug messages")
	mflags := addMsgrFlags(fs, "lossy-client")
	af := addAuthFlags(fs)
	prof := addProfileFlags(fs)
	pos, code, ok := parseFlags(e, fs, args)
	if !ok {
		return code
	}
	switch {
	case len(pos) > 1 || (len(pos) == 0 && *af.conf == ""):
		return usageError(e, fs, "want one address (v2:IP:PORT/NONCE, v1:IP:PORT/NONCE for msgr1, tcp://IP:PORT, unix://PATH or shm://NAME), or -c ceph.conf to ping its mons; got %d arguments", len(pos))
	case *count < 1:
		return usageError(e, fs, "--count must be at least 1")
	case *size < 0 || *size > maxPingSize:
		return usageError(e, fs, "--size must be between 0 and %d", maxPingSize)
	case *inflight < 1:
		return usageError(e, fs, "--inflight must be at least 1")
	case *interval < 0:
		return usageError(e, fs, "--interval must not be negative")
	case *timeout <= 0:
		return usageError(e, fs, "--timeout must be positive")
	case *warmup < 0:
		return usageError(e, fs, "--warmup must not be negative")
	}
	mopts, err := mflags.options()
	if err != nil {
		return usageError(e, fs, "%v", err)
	}
	if mopts.Auth, err = af.resolve(); err != nil {
		return usageError(e, fs, "%v", err)
	}
	addrs, err := pingTargets(pos, mopts.Auth)
	if err != nil {
		return usageError(e, fs, "%v", err)
	}
	addr := addrs[0]
	opts := pingOptions{Count: *count, Size: *size, Inflight: *inflight, Interval: *interval, Verify: *verify}
	if opts.Verify {
		opts.Size = max(opts.Size, counterBytes)
	}

	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	log := newLogger(e, *verbose)
	pc, err := dialPingAny(ctx, addrs, log, mopts)
	if pc != nil {
		addr = pc.addr
	}
	if err != nil {
		res := &pingResult{Requested: opts.Count, Verify: opts.Verify, Err: err}
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
		fmt.Fprintf(e.stdout, "PING %s (%s): %d pings, %d data bytes each, %d in flight, policy %s\n", addr, peer, opts.Count, opts.Size, opts.Inflight, mopts.PolicyName)
	}
	stopProf, err := prof.start()
	if err != nil {
		stopProf()
		fmt.Fprintf(e.stderr, "ferry ping: %v\n", err)
		return exitError
	}
	var warm *pingResult
	if *warmup > 0 {
		warm = pc.warmUp(ctx, opts, *warmup)
	}
	res := warm
	if warm == nil || warm.Errors() == 0 && warm.Err == nil {
		res = pc.run(ctx, opts)
	}
	stopProf()
	rep := newPingReport(res, opts, addr, peer)
	rep.Policy = mopts.PolicyName
	if warm != nil {
		rep.WarmupS, rep.WarmupPings = warm.Elapsed.Seconds(), warm.OK
	}
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
	Peer       string `json:"peer,omitempty"`
	Addr       string `json:"addr,omitempty"`
	Size       int    `json:"size"`
	Inflight   int    `json:"inflight"`
	Requested  int    `json:"requested"`
	Count      int    `json:"count"`  // pings answered correctly
	Errors     int    `json:"errors"` // pings not answered correctly, plus unexpected, duplicated and reordered replies
	Mismatches int    `json:"mismatches"`
	Unanswered int    `json:"unanswered"`
	Unexpected int    `json:"unexpected"`
	// Sent is the number of pings sent; Lost those of them never echoed.
	Sent int `json:"sent"`
	Lost int `json:"lost"`
	// Duplicated and Reordered are measured with --verify only: echoes of
	// a counter already seen, and first echoes of a counter after a
	// higher one.
	Duplicated *int `json:"duplicated,omitempty"`
	Reordered  *int `json:"reordered,omitempty"`
	// Reconnects counts the sessions resumed or restarted on a new socket
	// plus the new connections made after a lossy one was reset.
	Reconnects uint64 `json:"reconnects"`
	// Resets counts the resets the client was told about: a lossy
	// connection that failed, or the peer resetting a lossless session.
	Resets     int     `json:"resets"`
	Verify     bool    `json:"verify,omitempty"`
	Policy     string  `json:"policy,omitempty"`
	RTTMin     float64 `json:"rtt_us_min"`
	RTTAvg     float64 `json:"rtt_us_avg"`
	RTTP50     float64 `json:"rtt_us_p50"`
	RTTP99     float64 `json:"rtt_us_p99"`
	RTTMax     float64 `json:"rtt_us_max"`
	MsgsPerS   float64 `json:"msgs_per_s"`   // round trips per second
	MBytesPerS float64 `json:"mbytes_per_s"` // data payload sent + received, 10^6 B/s
	Bytes      int64   `json:"bytes"`        // data payload sent + received
	ElapsedS   float64 `json:"elapsed_s"`
	// WarmupS and WarmupPings are the time and the pings of the warm-up
	// (--warmup), left out of every other figure.
	WarmupS     float64 `json:"warmup_s,omitempty"`
	WarmupPings int     `json:"warmup_pings,omitempty"`
	Status      any     `json:"status,omitempty"` // the first reply's status: raw JSON, or a string
	Error       string  `json:"error,omitempty"`
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
		Sent:       res.Sent,
		Lost:       res.Lost,
		Reconnects: res.Reconnects,
		Resets:     res.Resets,
		Verify:     res.Verify,
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
	if res.Verify {
		d, o := res.Duplicated, res.Reordered
		r.Duplicated, r.Reordered = &d, &o
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
	if res.Verify {
		fmt.Fprintf(w, "verify: %d sent, %d lost, %d duplicated, %d reordered; %d reconnects, %d resets\n", r.Sent, r.Lost, res.Duplicated, res.Reordered, r.Reconnects, r.Resets)
	} else if r.Reconnects > 0 || r.Resets > 0 {
		fmt.Fprintf(w, "%d reconnects, %d resets\n", r.Reconnects, r.Resets)
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
	Size     int // data segment bytes per ping (at least counterBytes with Verify)
	Inflight int // maximum outstanding pings, at least 1
	// Interval paces the sends to one per Interval on average; falling
	// behind the schedule is caught up by at most Inflight sends at once.
	// 0 sends as fast as the window allows.
	Interval time.Duration
	// Verify tags each ping's data with its counter (1, 2, ... within the
	// run), matches echoes by that counter rather than by tid, and counts
	// duplicated and reordered echoes. It also makes the run ride out
	// resets of a lossy connection by connecting again.
	Verify bool
	// Until, when set, ends the run's sending at that time, whatever
	// Count (then a bound) says; Requested becomes the count sent.
	Until time.Time
	// Progress, if set, is called on the engine's goroutine after each
	// reply with the number of pings answered so far.
	Progress func(done, total int)
}

// counterBytes is the size of the counter at the start of a verified
// ping's data.
const counterBytes = 8

// pingResult is the outcome of one run.
type pingResult struct {
	Requested  int
	Sent       int
	OK         int // replies whose data matched
	Mismatches int // replies whose data did not match
	Unanswered int // pings with no reply (not sent, or the run stopped)
	Unexpected int // replies that matched no ping sent
	Lost       int // pings sent and never answered
	Duplicated int // Verify: echoes of a counter already seen
	Reordered  int // Verify: first echoes of a counter below one seen before
	Reconnects uint64
	Resets     int // lossy connections reset, plus remote session resets
	Verify     bool
	RTTs       []time.Duration
	Elapsed    time.Duration // first send to last reply (or to the stop)
	Bytes      int64         // data segment bytes sent and received
	Status     []byte        // status string of the first reply with a front
	Err        error         // why the run stopped early
	Mismatch   error         // the first data mismatch
}

// Errors returns the number of pings not answered correctly plus the
// unexpected, duplicated and reordered replies.
func (r *pingResult) Errors() int {
	return r.Requested - r.OK + r.Unexpected + r.Duplicated + r.Reordered
}

func (r *pingResult) firstError() error {
	switch {
	case r.Err != nil:
		return r.Err
	case r.Mismatch != nil:
		return r.Mismatch
	case r.Duplicated > 0 || r.Reordered > 0:
		return fmt.Errorf("%d duplicated and %d reordered replies", r.Duplicated, r.Reordered)
	case r.Unexpected > 0:
		return fmt.Errorf("%d unexpected replies", r.Unexpected)
	case r.Lost > 0:
		return fmt.Errorf("%d of %d pings sent were never answered (lost to connection resets)", r.Lost, r.Sent)
	}
	return nil
}

// connEvent is a reset a dispatcher callback reported.
type connEvent struct {
	c      *msgr.Conn
	remote bool // the peer reset the session (else a lossy connection failed)
}

// pingClient is a client messenger with one connection to a peer, and the
// dispatcher that hands MPing replies and reset events to the engine. run
// must not be called concurrently.
type pingClient struct {
	m       *msgr.Messenger
	conn    *msgr.Conn
	addr    string
	replies chan *msg.Message
	done    chan struct{} // closed by Close: the dispatcher stops waiting
	once    sync.Once

	evMu   sync.Mutex
	events []connEvent
	evCh   chan struct{} // capacity 1: events were added

	// sig (capacity 1) is signalled with every reply and event, for the
	// engine waiting in Conn.Await (which reads the replies itself).
	sig chan struct{}

	backoff, maxBackoff time.Duration // between redial attempts

	nextTid uint64 // last tid used; tids are unique across runs
	pattern []byte // data pattern, see requestData
	crcs    dataCRCs

	// cx, with cephx, logs in to a mon reached over msgr1 with MAuth
	// (authflags.go); its replies come on auths.
	cx    *cephx.Client
	auths chan *msg.Message
}

// replyQueueLen bounds the replies dispatched but not yet taken by the
// engine; the dispatcher blocks beyond it, which stalls the messenger's
// dispatch goroutine until the engine catches up.
const replyQueueLen = 1024

// dialPing starts a lossy client messenger with default settings,
// connects to addr and waits for the handshake.
func dialPing(ctx context.Context, addr string, log *slog.Logger) (*pingClient, error) {
	return dialPingWith(ctx, addr, log, defaultMsgrOptions("lossy-client"))
}

// dialPingWith starts a client messenger with the policy and settings of
// o, connects to addr and waits for the handshake. A lossless policy
// keeps retrying a refused connection until ctx ends.
func dialPingWith(ctx context.Context, addr string, log *slog.Logger, o *msgrOptions) (*pingClient, error) {
	cfg := msgr.Config{Logger: log}
	o.configure(&cfg)
	m, err := msgr.New(cfg)
	if err != nil {
		return nil, err
	}
	m.SetDefaultPolicy(o.Policy)
	p := &pingClient{
		m: m, addr: addr,
		replies:    make(chan *msg.Message, replyQueueLen),
		done:       make(chan struct{}),
		evCh:       make(chan struct{}, 1),
		sig:        make(chan struct{}, 1),
		backoff:    cmp.Or(o.InitialBackoff, 200*time.Millisecond),
		maxBackoff: cmp.Or(o.MaxBackoff, 15*time.Second),
	}
	p.maxBackoff = max(p.maxBackoff, p.backoff)
	if o.Auth != nil {
		if p.cx, err = o.Auth.cephxClient(); err != nil {
			return nil, err
		}
		p.auths = make(chan *msg.Message, 1)
	}
	m.AddDispatcherTail(p)
	if err := m.Start(); err != nil {
		p.Close()
		return nil, err
	}
	c, err := p.connect(ctx)
	if err != nil {
		p.Close()
		return nil, err
	}
	p.conn = c
	return p, nil
}

// connect makes one connection to p.addr and waits for its handshake.
func (p *pingClient) connect(ctx context.Context) (*msgr.Conn, error) {
	c, err := p.m.Connect(p.addr)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", p.addr, err)
	}
	if err := c.Ready(ctx); err != nil {
		return nil, fmt.Errorf("connect %s: %w", p.addr, err)
	}
	if p.cx != nil && strings.HasPrefix(p.addr, "v1:") && c.PeerType() == msg.EntityMon {
		if err := mauthLoginConn(ctx, c, p.cx, p.auths); err != nil {
			c.MarkDown()
			return nil, fmt.Errorf("connect %s: %w", p.addr, err)
		}
	}
	return c, nil
}

// redial replaces a closed connection: it connects again, waiting with
// backoff between failed attempts, until it succeeds or ctx ends.
func (p *pingClient) redial(ctx context.Context) (*msgr.Conn, error) {
	wait := p.backoff
	for {
		c, err := p.connect(ctx)
		if err == nil {
			p.conn = c
			return c, nil
		}
		if ctx.Err() != nil || errors.Is(err, msgr.ErrShutdown) {
			return nil, err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("reconnecting: %w (last attempt: %v)", ctx.Err(), err)
		}
		wait = min(2*wait, p.maxBackoff)
	}
}

// Dispatch takes MPing replies; it implements msgr.Dispatcher.
func (p *pingClient) Dispatch(m *msg.Message) bool {
	if m.Header.Type == ceph.MsgAuthReply && p.auths != nil {
		select {
		case p.auths <- m:
		default: // no login waits for it
		}
		return true
	}
	if m.Header.Type != ceph.MsgPing {
		return false
	}
	select {
	case p.replies <- m:
	case <-p.done:
	}
	p.signal(m)
	return true
}

// signal wakes the engine waiting in Await for a reply or an event.
func (p *pingClient) signal(m *msg.Message) {
	select {
	case p.sig <- struct{}{}:
	default:
	}
	if c, ok := m.Conn.(*msgr.Conn); ok {
		c.Nudge()
	}
}

// CanFastDispatch takes MPing replies on the goroutine that reads them
// (the engine itself, in Await) while the reply queue has room, so that
// no other goroutine hands them over.
func (p *pingClient) CanFastDispatch(m *msg.Message) bool {
	return m.Header.Type == ceph.MsgPing && len(p.replies) < cap(p.replies)/2
}

// FastDispatch queues an MPing reply for the engine.
func (p *pingClient) FastDispatch(m *msg.Message) { p.Dispatch(m) }

// HandleReset hears that a lossy connection failed (msgr.ResetHandler).
func (p *pingClient) HandleReset(c *msgr.Conn) { p.addEvent(connEvent{c: c}) }

// HandleRemoteReset hears that the peer reset the session: what was
// queued or unacknowledged on it is gone (msgr.RemoteResetHandler).
func (p *pingClient) HandleRemoteReset(c *msgr.Conn) { p.addEvent(connEvent{c: c, remote: true}) }

func (p *pingClient) addEvent(ev connEvent) {
	p.evMu.Lock()
	p.events = append(p.events, ev)
	p.evMu.Unlock()
	select {
	case p.evCh <- struct{}{}:
	default:
	}
	select {
	case p.sig <- struct{}{}:
	default:
	}
	if ev.c != nil {
		ev.c.Nudge()
	}
}

func (p *pingClient) takeEvents() []connEvent {
	p.evMu.Lock()
	defer p.evMu.Unlock()
	evs := p.events
	p.events = nil
	return evs
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
// request costs one small allocation whatever its size. A verified run
// passes the ping's counter as tid.
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

// dataCRCs computes the msgr2 data-segment CRC of requestData's data
// without a pass over the pattern for every ping, so that the ping engine
// adds no CRC pass of its own to what it measures. The CRC register
// update is linear, so for data h||P (h the tid, P n bytes of pattern)
// R(seed, h||P) = R(R(seed, h), 0^n) xor R(0, P): R(0, P) is kept for
// each of the pattern's patternPeriod offsets, and R(x, 0^n) is the xor
// of the columns R(1<<i, 0^n) for the bits i set in x.
type dataCRCs struct {
	n      int // pattern bytes the tables are for
	zeros  [32]uint32
	off    [patternPeriod]uint32
	offSet [patternPeriod]bool
}

// dataCRCMin is the smallest ping data whose CRC the engine supplies
// (msg.Message.SetDataCRCAhead); it is also where msgr starts recording
// a received message's checked CRC (msg.Message.ReceivedDataCRC).
const dataCRCMin = 64 << 10

// dataCRC returns msgr2.SegmentCRC of requestData(tid, size).
func (p *pingClient) dataCRC(tid uint64, size int) uint32 {
	d := p.requestData(tid, size)
	if len(d) < 2 {
		return msgr2.SegmentCRC(d)
	}
	t := &p.crcs
	n := len(d[1])
	if t.n != n {
		*t = dataCRCs{n: n}
		zero := make([]byte, n)
		for i := range t.zeros {
			t.zeros[i] = msg.CRC32C(1<<i, zero)
		}
	}
	off := int(tid % patternPeriod)
	if !t.offSet[off] {
		t.off[off], t.offSet[off] = msg.CRC32C(0, d[1]), true
	}
	x := msgr2.SegmentCRC(d[:1])
	crc := t.off[off]
	for i := range t.zeros {
		if x&(1<<i) != 0 {
			crc ^= t.zeros[i]
		}
	}
	return crc
}

// counterOf reads the counter at the start of a verified ping's data.
func counterOf(d msg.Buffers) (uint64, bool) {
	if d.Len() < counterBytes {
		return 0, false
	}
	var b [counterBytes]byte
	n := 0
	for _, p := range d {
		n += copy(b[n:], p)
		if n == counterBytes {
			break
		}
	}
	return binary.LittleEndian.Uint64(b[:]), true
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
	sent   time.Time
	data   msg.Buffers
	crc    uint32 // data's msgr2 segment CRC, if crcSet
	crcSet bool
}

// echoed reports whether the data of reply r equals pp's. When msgr
// checked r's data against its frame CRC (msg.Message.ReceivedDataCRC)
// and pp's CRC is known, the two CRCs are compared instead of the bytes:
// the data was read once already, and a second pass would be the ping
// engine's cost, not the messenger's.
func (pp *pendingPing) echoed(r *msg.Message) bool {
	if crc, ok := r.ReceivedDataCRC(); ok && pp.crcSet {
		return r.Data.Len() == pp.data.Len() && crc == pp.crc
	}
	return buffersEqual(r.Data, pp.data)
}

// echoTracker checks the counters echoed in a verified run. Counters are
// sent in increasing order on one priority, so on a lossless session the
// echoes come back in increasing order, each once.
type echoTracker struct {
	seen       []bool // seen[c]: counter c was echoed (index 0 unused)
	max        uint64 // highest counter echoed
	duplicated int    // echoes of a counter already seen
	reordered  int    // first echoes of a counter below max
}

// echo records an echo of counter c (1 <= c < len(seen)) and reports
// whether it is the first.
func (t *echoTracker) echo(c uint64) bool {
	if t.seen[c] {
		t.duplicated++
		return false
	}
	t.seen[c] = true
	if c < t.max {
		t.reordered++
	} else {
		t.max = c
	}
	return true
}

// run is the ping engine: it sends o.Count pings with at most o.Inflight
// outstanding, matches each reply to its ping (by the counter in the data
// with o.Verify; otherwise by tid, and a reply with tid 0, as a Ceph mon
// sends, goes to the oldest outstanding ping), checks that the reply's
// data equals the request's, and records the round-trip time from just
// before Send to the reply's dispatch.
//
// On a lossless policy the connection outlives socket faults and the run
// simply goes on. When a lossy connection is reset the run stops with an
// error, unless o.Verify is set: then the pings in flight are given up
// (they count as lost unless their echo still arrives), a new connection
// is made and the run goes on. A remote reset of a lossless session gives
// up the pings in flight the same way. The run ends when every ping sent
// has been answered or given up, or when ctx ends.
func (p *pingClient) run(ctx context.Context, o pingOptions) *pingResult {
	if o.Verify {
		o.Size = max(o.Size, counterBytes)
	}
	res := &pingResult{Requested: o.Count, Verify: o.Verify, RTTs: make([]time.Duration, 0, min(o.Count, 1<<16))}
	pending := make(map[uint64]pendingPing, o.Inflight)
	abandoned := make(map[uint64]pendingPing) // given up on a reset; an echo may still come
	var order []uint64                        // keys in send order, for replies without a tid
	head := 0
	answered := 0
	var track *echoTracker
	if o.Verify {
		track = &echoTracker{seen: make([]bool, o.Count+1)}
	}
	conn := p.conn
	conns := []*msgr.Conn{conn}
	rideOut := o.Verify || !conn.Policy().Lossy
	p.takeEvents() // events from before this run are about pings it did not send

	handle := func(r *msg.Message) {
		defer r.Done()
		var key uint64
		var pp pendingPing
		ok := false
		if o.Verify {
			c, valid := counterOf(r.Data)
			if !valid || c == 0 || c > uint64(res.Sent) {
				res.Unexpected++
				return
			}
			if !track.echo(c) {
				return // a duplicate
			}
			key = c
		} else {
			key = r.Header.Tid
		}
		if pp, ok = pending[key]; ok {
			delete(pending, key)
		} else if pp, ok = abandoned[key]; ok {
			delete(abandoned, key)
		} else if key == 0 && !o.Verify {
			for head < len(order) && !ok {
				key = order[head]
				head++
				if pp, ok = pending[key]; ok {
					delete(pending, key)
				}
			}
		}
		if !ok {
			res.Unexpected++
			return
		}
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
		if !pp.echoed(r) {
			res.Mismatches++
			if res.Mismatch == nil {
				res.Mismatch = fmt.Errorf("reply to ping %d: data differs from the request (%d bytes sent, %d received)", key, pp.data.Len(), r.Data.Len())
			}
		} else {
			res.OK++
			res.RTTs = append(res.RTTs, at.Sub(pp.sent))
		}
		if o.Progress != nil {
			o.Progress(answered, o.Count)
		}
	}
	// giveUp moves the pings in flight to abandoned, freeing the window.
	giveUp := func() {
		for k, pp := range pending {
			abandoned[k] = pp
		}
		clear(pending)
	}
	drain := func() {
		for {
			select {
			case r := <-p.replies:
				handle(r)
			default:
				return
			}
		}
	}

	if o.Size >= dataCRCMin && !o.Verify {
		// Fill the CRC tables before the clock starts.
		for tid := range uint64(patternPeriod) {
			p.dataCRC(tid, o.Size)
		}
	}
	start := time.Now()
	var nextSend time.Time
	var pace *time.Timer
	defer func() {
		if pace != nil {
			pace.Stop()
		}
	}()
loop:
	for res.Sent < o.Count || len(pending) > 0 {
		paced := false
		for res.Sent < o.Count && len(pending) < o.Inflight {
			now := time.Now()
			if !o.Until.IsZero() && !now.Before(o.Until) {
				o.Count = res.Sent // the time is up: stop sending
				res.Requested = o.Count
				break
			}
			if o.Interval > 0 && now.Before(nextSend) {
				paced = true
				break
			}
			p.nextTid++
			m := (&ceph.Ping{}).Marshal()
			m.Header.Tid = p.nextTid
			key := p.nextTid
			if o.Verify {
				key = uint64(res.Sent) + 1
			}
			data := p.requestData(key, o.Size)
			m.Data = data
			pp := pendingPing{sent: now, data: data}
			if o.Size >= dataCRCMin && !o.Verify {
				pp.crc, pp.crcSet = p.dataCRC(key, o.Size), true
				m.SetDataCRCAhead(pp.crc)
			}
			if err := conn.Send(m); err != nil {
				if rideOut && errors.Is(err, msgr.ErrClosed) {
					break // the select below sees conn.Done
				}
				res.Err = fmt.Errorf("send ping %d: %w", key, err)
				break loop
			}
			pending[key] = pp
			order = append(order, key)
			res.Sent++
			res.Bytes += int64(o.Size)
			if o.Interval > 0 {
				// The schedule: one send per interval, never more than
				// a window's worth behind.
				if floor := now.Add(-time.Duration(o.Inflight) * o.Interval); nextSend.Before(floor) {
					nextSend = floor
				}
				nextSend = nextSend.Add(o.Interval)
			}
		}
		if res.Sent >= o.Count && len(pending) == 0 {
			break // Until ended the sending with nothing outstanding
		}
		select {
		case <-p.sig: // stale: what it announced was taken
		default:
		}
		if !paced && len(p.replies) == 0 && len(p.evCh) == 0 {
			// Read the replies in this goroutine (msgr's reader role):
			// the network wakes the engine rather than a reader that
			// would have to wake it. It returns on a reply, an event,
			// the connection's end or ctx's; the select below takes it.
			_, _ = conn.Await(ctx, p.sig)
		}
		var paceC <-chan time.Time
		if paced {
			if pace == nil {
				pace = time.NewTimer(time.Until(nextSend))
			} else {
				pace.Reset(time.Until(nextSend))
			}
			paceC = pace.C
		}
		select {
		case r := <-p.replies:
			handle(r)
		case <-paceC:
		case <-p.evCh:
			for _, ev := range p.takeEvents() {
				// A lossy reset closes the connection: conn.Done handles
				// it. A remote reset dropped what the session held.
				if ev.remote && ev.c == conn {
					res.Resets++
					giveUp()
				}
			}
		case <-conn.Done():
			// Take the replies dispatched before the connection closed.
			drain()
			if !rideOut {
				if res.Sent < o.Count || len(pending) > 0 {
					res.Err = fmt.Errorf("connection closed with %d pings outstanding: %w", len(pending), connErr(conn))
				}
				break loop
			}
			res.Resets++
			giveUp()
			c, err := p.redial(ctx)
			if err != nil {
				res.Err = fmt.Errorf("connection reset and not reestablished: %w", err)
				break loop
			}
			conn = c
			conns = append(conns, c)
			res.Reconnects++
		case <-ctx.Done():
			res.Err = fmt.Errorf("%d of %d pings unanswered: %w", o.Count-answered, o.Count, ctx.Err())
			break loop
		}
	}
	res.Elapsed = time.Since(start)
	res.Unanswered = o.Count - answered
	res.Lost = len(pending) + len(abandoned)
	for _, c := range conns {
		res.Reconnects += c.Reconnects()
	}
	if track != nil {
		res.Duplicated, res.Reordered = track.duplicated, track.reordered
	}
	return res
}

// warmUp pings as o says for d and returns the run, whose results the
// caller leaves out (or reports instead, if they have errors).
func (p *pingClient) warmUp(ctx context.Context, o pingOptions, d time.Duration) *pingResult {
	o.Count, o.Until = math.MaxInt32, time.Now().Add(d)
	return p.run(ctx, o)
}

// connErr returns why c closed.
func connErr(c *msgr.Conn) error {
	if err := c.Err(); err != nil {
		return err
	}
	return errors.New("connection reset")
}
