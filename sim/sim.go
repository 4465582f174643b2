package sim

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/ferrymsg/ferry/coll"
	"github.com/ferrymsg/ferry/swim"
)

// Codec says how messages travel between the simulated machines.
type Codec uint8

const (
	// CodecBytes encodes each message with swim's codec when it is sent
	// ((*swim.Message).Append) and decodes it when it is delivered
	// (swim.DecodeMessage), as a real transport does.
	CodecBytes Codec = iota
	// CodecStruct copies the message struct when it is sent and hands the
	// copy to the receiver. The trace still holds each message's encoding,
	// so both codecs give the same trace hash for the same seed.
	CodecStruct
)

// String returns "bytes" or "struct".
func (c Codec) String() string {
	switch c {
	case CodecBytes:
		return "bytes"
	case CodecStruct:
		return "struct"
	}
	return fmt.Sprintf("Codec(%d)", uint8(c))
}

// Config is one simulation. The zero value of every field but Ranks and
// Duration means its default.
type Config struct {
	// Ranks is the size of the group, ranks 0 to Ranks-1; every rank
	// starts knowing every other one alive at incarnation 0.
	Ranks int
	// Seed selects every random choice of the run.
	Seed uint64
	// Duration is the simulated time the run lasts.
	Duration time.Duration
	// Swim configures every rank's machine (swim's defaults when zero).
	Swim swim.Config
	// Network is the simulated network.
	Network Network
	// Faults is the schedule of crashes and pauses.
	Faults Faults
	// Collectives are broadcasts run over the group (none by default).
	Collectives Collectives
	// Codec is how messages travel; CodecBytes by default.
	Codec Codec
	// Trace, if set, receives a copy of the canonical trace (the bytes
	// hashed into Result.TraceHash; see tracer for the layout).
	Trace io.Writer
	// Started, if set, is called once the machines are built, just before
	// simulated time starts (to start a CPU profile that leaves setup out,
	// say).
	Started func()
}

// CrashResult is what the group learned about one crash. Times are since
// the start of the run; a negative time means "never".
type CrashResult struct {
	Rank int
	At   time.Duration
	// FirstDetected is when the first rank declared the crashed rank
	// dead, and FirstBy that rank.
	FirstDetected time.Duration
	FirstBy       int
	// KnownByAll is when the last live rank (one that never crashed)
	// came to hold the crashed rank dead, for good.
	KnownByAll time.Duration
	// Known is how many live ranks hold it dead at the end, out of Live.
	Known, Live int
}

// PauseResult is what happened to one paused rank.
type PauseResult struct {
	Rank    int
	At, For time.Duration
	// Suspected counts the ranks that suspected it at some point, and
	// DeclaredDead those that declared it dead (false positives).
	Suspected, DeclaredDead int
}

// Result is the outcome of a run.
type Result struct {
	Ranks    int
	Seed     uint64
	Duration time.Duration // simulated time run
	Period   time.Duration // the SWIM protocol period
	Codec    Codec

	Crashes []CrashResult
	Pauses  []PauseResult
	Colls   []CollResult

	// DetectedByAll counts the crashes known dead to every live rank by
	// the end of the run.
	DetectedByAll int
	// FalsePositives counts the ranks declared dead by any rank while
	// they had not crashed (paused ranks included), and
	// FalseDeclarations the (declarer, rank) pairs.
	FalsePositives, FalseDeclarations int

	// Sent counts messages the machines sent; Delivered and Dropped
	// their fates (messages still in flight at the end are in neither).
	Sent, Delivered, Dropped uint64
	// CollMsgs counts the collectives' messages (forwards, reports and
	// refusals), CollErrors the inputs a collective machine refused
	// (always 0 when all is well).
	CollMsgs, CollErrors uint64
	// DecodeErrors counts messages the simulator encoded that swim's
	// codec did not decode (a codec bug; always 0 when all is well).
	DecodeErrors uint64
	// Events counts the scheduler's events, TraceRecords the trace's.
	Events, TraceRecords uint64

	// Setup is the wall time spent building the machines, Wall the wall
	// time of the run itself (what SimPerWall divides by).
	Setup, Wall time.Duration
	// CPU is the process's CPU time (user and system, all threads: the
	// garbage collector's too) during the run, 0 where unknown. On a
	// shared machine SimPerCPU says what the core costs when Wall is
	// stretched by other work.
	CPU time.Duration
	// PeakRSS is the process's peak resident set size in bytes after the
	// run (VmHWM), 0 where unknown.
	PeakRSS int64
	// TraceHash is the hex SHA-256 of the canonical trace.
	TraceHash string
}

// MsgsPerRankPeriod is the number of messages sent per rank per protocol
// period, over all ranks and the whole run.
func (r *Result) MsgsPerRankPeriod() float64 {
	periods := float64(r.Duration) / float64(r.Period)
	if periods == 0 || r.Ranks == 0 {
		return 0
	}
	return float64(r.Sent) / (float64(r.Ranks) * periods)
}

// SimPerWall is simulated seconds per wall-clock second of the run (setup
// excluded).
func (r *Result) SimPerWall() float64 {
	if r.Wall <= 0 {
		return 0
	}
	return r.Duration.Seconds() / r.Wall.Seconds()
}

// SimPerCPU is simulated seconds per second of the process's CPU time
// during the run (0 where unknown).
func (r *Result) SimPerCPU() float64 {
	if r.CPU <= 0 {
		return 0
	}
	return r.Duration.Seconds() / r.CPU.Seconds()
}

// Periods converts a duration to protocol periods.
func (r *Result) Periods(d time.Duration) float64 {
	return float64(d) / float64(r.Period)
}

// DetectPeriodsMax is the longest time, in protocol periods, from a crash
// to the moment every live rank held it dead, over the crashes that got
// there; 0 when none did.
func (r *Result) DetectPeriodsMax() float64 {
	m := 0.0
	for _, c := range r.Crashes {
		if c.KnownByAll >= 0 {
			m = max(m, r.Periods(c.KnownByAll-c.At))
		}
	}
	return m
}

// FirstDetectPeriodsMax is the longest time, in protocol periods, from a
// crash to its first detection, over the crashes detected.
func (r *Result) FirstDetectPeriodsMax() float64 {
	m := 0.0
	for _, c := range r.Crashes {
		if c.FirstDetected >= 0 {
			m = max(m, r.Periods(c.FirstDetected-c.At))
		}
	}
	return m
}

// Seed streams: each rank's machine draws from PCG(seed, rank); the
// network and the fault schedule from streams beyond any rank.
const (
	streamNet    = 1<<40 + 1
	streamFaults = 1<<40 + 2
	streamColl   = 1<<40 + 3
)

// Node states.
const (
	up uint8 = iota
	paused
	crashed
)

// node is one rank.
type node struct {
	m     *swim.Machine
	timer int64 // time of the tick scheduled, or -1
	state uint8
	until int64   // paused: the time the last pause ends
	held  []int32 // paused: slots of the messages waiting (-i-1: collective message i)
}

// slot is a message in flight.
type slot struct {
	from, to uint32
	buf      []byte       // CodecBytes: the encoding
	msg      swim.Message // CodecStruct: the copy
}

// sim is a run in progress.
type sim struct {
	cfg    *Config
	q      queue
	net    *net
	tr     *tracer
	nodes  []node
	slots  []slot
	free   []int32
	recv   swim.Message // CodecBytes: decoded into, reused
	enc    []byte       // CodecStruct: the trace's encoding, reused
	now    int64
	heldMx int
	sched  []Pause // the pauses, as scheduled

	crashes []CrashResult
	pauses  []PauseResult
	crashIx []int32 // per rank: index in crashes, or -1
	crashT  []int64 // per rank: the time it crashed, or -1
	// deadAt[k*ranks+r] is when rank r came to hold crash k dead, or -1.
	deadAt  []int64
	pauseIx map[uint32]int32
	pSusp   []map[uint32]bool // per pause: ranks that suspected it
	pDead   []map[uint32]bool // per pause: ranks that declared it dead
	fpRank  map[uint32]bool
	res     Result

	collRnd     *rand.Rand
	collTopo    coll.Topology
	collTimeout int64
	colls       []*collRun // per collective; nil before it starts
	cmsgs       []collMsg
	cfree       []int32
	members     []swim.Member // reused
}

// Run simulates cfg and returns what happened. It fails for a
// configuration it cannot simulate (ErrConfig), or with ctx's error when
// ctx ends first.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	setup := time.Now()
	s, err := newSim(&cfg)
	if err != nil {
		return nil, err
	}
	s.res.Setup = time.Since(setup)
	if cfg.Started != nil {
		cfg.Started()
	}
	start, cpu := time.Now(), cpuTime()
	err = s.run(ctx)
	s.res.Wall = time.Since(start)
	s.res.CPU = cpuTime() - cpu
	if err != nil {
		return nil, err
	}
	s.finish()
	s.res.PeakRSS = PeakRSS()
	return &s.res, nil
}

func newSim(cfg *Config) (*sim, error) {
	if cfg.Ranks < 1 {
		return nil, fmt.Errorf("%w: %d ranks", ErrConfig, cfg.Ranks)
	}
	if cfg.Duration <= 0 {
		return nil, fmt.Errorf("%w: duration %v", ErrConfig, cfg.Duration)
	}
	if cfg.Codec > CodecStruct {
		return nil, fmt.Errorf("%w: %v", ErrConfig, cfg.Codec)
	}
	if err := cfg.Network.validate(cfg.Ranks); err != nil {
		return nil, err
	}
	if err := cfg.Swim.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	// The defaults as a machine applies them.
	sc := swim.New(0, cfg.Swim, rand.New(rand.NewPCG(0, 0))).Config()
	// Seeded pauses last a quarter to a half of the shortest suspicion
	// timeout (a suspicion confirmed as often as counts), so a paused rank
	// resumes before any suspicion of it ends.
	minSuspect := sc.SuspicionTimeoutFor(cfg.Ranks, sc.Confirmations)
	crashes, pauses, err := cfg.Faults.schedule(cfg.Ranks, cfg.Duration, minSuspect, rand.New(rand.NewPCG(cfg.Seed, streamFaults)))
	if err != nil {
		return nil, err
	}
	n := cfg.Ranks
	s := &sim{
		cfg:     cfg,
		net:     newNet(&cfg.Network, n, rand.New(rand.NewPCG(cfg.Seed, streamNet))),
		tr:      newTracer(cfg.Trace),
		nodes:   make([]node, n),
		crashIx: make([]int32, n),
		crashT:  make([]int64, n),
		pauseIx: make(map[uint32]int32),
		fpRank:  make(map[uint32]bool),
		heldMx:  cfg.Network.PauseBuffer,
	}
	if s.heldMx == 0 {
		s.heldMx = defaultPauseBuf
	}
	s.res = Result{Ranks: n, Seed: cfg.Seed, Duration: cfg.Duration, Period: sc.Period, Codec: cfg.Codec}
	for i := range s.crashIx {
		s.crashIx[i], s.crashT[i] = -1, -1
	}
	crashes = slices.DeleteFunc(crashes, func(c Crash) bool { return c.At > cfg.Duration })
	pauses = slices.DeleteFunc(pauses, func(p Pause) bool { return p.At > cfg.Duration })
	for i, c := range crashes {
		s.crashIx[c.Rank] = int32(i)
		s.crashes = append(s.crashes, CrashResult{Rank: c.Rank, At: c.At, FirstDetected: -1, FirstBy: -1, KnownByAll: -1})
		s.q.push(event{at: int64(c.At), kind: evCrash, rank: uint32(c.Rank)})
	}
	s.deadAt = make([]int64, len(crashes)*n)
	for i := range s.deadAt {
		s.deadAt[i] = -1
	}
	s.sched = pauses
	for i, p := range pauses {
		if _, ok := s.pauseIx[uint32(p.Rank)]; !ok {
			s.pauseIx[uint32(p.Rank)] = int32(len(s.pauses))
			s.pauses = append(s.pauses, PauseResult{Rank: p.Rank, At: p.At, For: p.For})
			s.pSusp = append(s.pSusp, map[uint32]bool{})
			s.pDead = append(s.pDead, map[uint32]bool{})
		} else if pr := &s.pauses[s.pauseIx[uint32(p.Rank)]]; pr.At+pr.For < p.At+p.For {
			pr.For = p.At + p.For - pr.At
		}
		s.q.push(event{at: int64(p.At), kind: evPause, rank: uint32(p.Rank), arg: int32(i)})
		s.q.push(event{at: int64(p.At + p.For), kind: evResume, rank: uint32(p.Rank)})
	}
	s.collRnd = rand.New(rand.NewPCG(cfg.Seed, streamColl))
	if err := s.collSetup(&cfg.Collectives); err != nil {
		return nil, err
	}
	for i, p := range cfg.Network.Partitions {
		s.q.push(event{at: int64(p.Start), kind: evSplit, arg: int32(i)})
		s.q.push(event{at: int64(p.End), kind: evHeal, arg: int32(i)})
	}
	for r := range n {
		m := swim.New(swim.ID(r), cfg.Swim, rand.New(rand.NewPCG(cfg.Seed, uint64(r))))
		for o := range n {
			if o != r {
				m.Add(swim.ID(o), 0)
			}
		}
		s.nodes[r] = node{m: m, timer: -1}
	}
	// Every machine asks for its first tick.
	for r := range s.nodes {
		s.arm(uint32(r), false)
	}
	return s, nil
}

// run processes events until the end of the simulated time, or until ctx
// ends (it looks every 16384 events).
func (s *sim) run(ctx context.Context) error {
	end := int64(s.cfg.Duration)
	for s.q.len() > 0 && s.q.peek().at <= end {
		if s.res.Events&(1<<14-1) == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		e := s.q.pop()
		s.now = e.at
		s.res.Events++
		switch e.kind {
		case evTick:
			n := &s.nodes[e.rank]
			if n.state != up || e.at != n.timer {
				continue // stale, or the rank is down
			}
			n.timer = -1
			n.m.Tick(time.Duration(s.now))
			s.drain(e.rank, true)
		case evDeliver:
			s.deliver(e.arg)
		case evCrash:
			n := &s.nodes[e.rank]
			n.state = crashed
			s.crashT[e.rank] = s.now
			s.tr.fault(recCrash, s.now, e.rank)
			held := n.held
			n.held = nil
			for _, h := range held {
				if h < 0 {
					s.collDeliver(-h - 1) // dropped, a forward refused
				} else {
					s.dropSlot(h, dropCrashed)
				}
			}
			s.collCrash(e.rank)
		case evPause:
			n := &s.nodes[e.rank]
			if n.state == crashed {
				continue
			}
			p := s.sched[e.arg]
			n.until = max(n.until, int64(p.At+p.For))
			if n.state == up {
				n.state = paused
				s.tr.fault(recPause, s.now, e.rank)
			}
		case evResume:
			n := &s.nodes[e.rank]
			if n.state != paused || s.now < n.until {
				continue
			}
			n.state = up
			s.tr.fault(recResume, s.now, e.rank)
			// What waited in the socket buffers reaches the machine first,
			// in arrival order, then its timers run.
			held := n.held
			n.held = nil
			for _, h := range held {
				if h < 0 {
					s.collDeliver(-h - 1)
				} else {
					s.deliver(h)
				}
			}
			n.timer = -1
			s.arm(e.rank, false)
		case evColl:
			s.collStart(e.arg)
		case evCollDeliver:
			s.collDeliver(e.arg)
		case evCollTick:
			s.collTick(e.arg, e.rank)
		case evSplit:
			s.net.active |= 1 << e.arg
			s.tr.fault(recSplit, s.now, uint32(e.arg))
		case evHeal:
			s.net.active &^= 1 << e.arg
			s.tr.fault(recHeal, s.now, uint32(e.arg))
		}
	}
	s.now = end
	return nil
}

// arm schedules rank r's next tick at the time its machine asks for. A
// machine just ticked that asks for the same instant again is ticked a
// nanosecond later, so a machine cannot stall the clock.
func (s *sim) arm(r uint32, ticked bool) {
	n := &s.nodes[r]
	next := int64(n.m.Next())
	if next < s.now {
		next = s.now
	}
	if ticked && next == s.now {
		next++
	}
	if next == n.timer {
		return
	}
	n.timer = next
	s.q.setTick(r, next)
}

// drain sends what rank r's machine put in its outbox, records its
// membership events and re-arms its timer.
func (s *sim) drain(r uint32, ticked bool) {
	n := &s.nodes[r]
	out := n.m.Outbox()
	for i := range out {
		s.send(r, uint32(out[i].To), &out[i].Msg)
	}
	for _, ev := range n.m.Events() {
		s.member(r, ev)
	}
	s.arm(r, ticked)
}

// send puts a message on the network.
func (s *sim) send(from, to uint32, m *swim.Message) {
	s.res.Sent++
	if int(to) >= len(s.nodes) {
		s.enc = m.Append(s.enc[:0])
		s.drop(from, to, dropCrashed, s.enc)
		return
	}
	delay, why := s.net.send(from, to)
	if why != 0 {
		s.enc = m.Append(s.enc[:0])
		s.drop(from, to, why, s.enc)
		return
	}
	i := s.alloc()
	sl := &s.slots[i]
	sl.from, sl.to = from, to
	if s.cfg.Codec == CodecBytes {
		sl.buf = m.Append(sl.buf[:0])
	} else {
		copyMessage(&sl.msg, m)
	}
	s.q.push(event{at: s.now + delay, kind: evDeliver, rank: to, arg: i})
}

// deliver hands message slot i to its destination, or holds it while the
// destination is paused, or drops it.
func (s *sim) deliver(i int32) {
	sl := &s.slots[i]
	from, to := sl.from, sl.to
	n := &s.nodes[to]
	switch {
	case n.state == crashed:
		s.dropSlot(i, dropCrashed)
		return
	case n.state == paused:
		if len(n.held) >= s.heldMx {
			s.dropSlot(i, dropPauseFull)
			return
		}
		n.held = append(n.held, i)
		return
	case s.net.cut(from, to):
		s.dropSlot(i, dropPartition)
		return
	}
	var m *swim.Message
	if s.cfg.Codec == CodecBytes {
		s.tr.message(recDeliver, s.now, from, to, 0, sl.buf)
		if err := swim.DecodeMessage(sl.buf, &s.recv); err != nil {
			// The simulator's own encoding did not decode: a codec bug,
			// counted and checked by the tests.
			s.res.DecodeErrors++
			s.res.Delivered++
			s.release(i)
			return
		}
		m = &s.recv
	} else {
		s.enc = sl.msg.Append(s.enc[:0])
		s.tr.message(recDeliver, s.now, from, to, 0, s.enc)
		m = &sl.msg
	}
	s.res.Delivered++
	n.m.Receive(time.Duration(s.now), swim.ID(from), m)
	s.release(i)
	s.drain(to, false)
}

func (s *sim) drop(from, to uint32, why uint8, b []byte) {
	s.res.Dropped++
	s.tr.message(recDrop, s.now, from, to, why, b)
}

func (s *sim) dropSlot(i int32, why uint8) {
	sl := &s.slots[i]
	b := sl.buf
	if s.cfg.Codec == CodecStruct {
		s.enc = sl.msg.Append(s.enc[:0])
		b = s.enc
	}
	s.drop(sl.from, sl.to, why, b)
	s.release(i)
}

func (s *sim) alloc() int32 {
	if k := len(s.free); k > 0 {
		i := s.free[k-1]
		s.free = s.free[:k-1]
		return i
	}
	s.slots = append(s.slots, slot{})
	return int32(len(s.slots) - 1)
}

func (s *sim) release(i int32) { s.free = append(s.free, i) }

// member records a membership event rank r's machine emitted.
func (s *sim) member(r uint32, ev swim.Event) {
	id := uint32(ev.ID)
	s.tr.member(s.now, r, id, ev.Incarnation, uint8(ev.State))
	if id == r || int(id) >= len(s.nodes) {
		return
	}
	if k := s.crashIx[id]; k >= 0 && s.crashT[id] >= 0 {
		at := &s.deadAt[int(k)*len(s.nodes)+int(r)]
		if ev.State != swim.Dead {
			*at = -1 // it came back in r's view (stale news)
			return
		}
		if *at < 0 {
			*at = s.now
		}
		if c := &s.crashes[k]; c.FirstDetected < 0 {
			c.FirstDetected = time.Duration(s.now)
			c.FirstBy = int(r)
		}
		return
	}
	p, paused := s.pauseIx[id]
	switch ev.State {
	case swim.Dead:
		s.res.FalseDeclarations++
		s.fpRank[id] = true
		if paused {
			s.pDead[p][r] = true
		}
	case swim.Suspect:
		if paused {
			s.pSusp[p][r] = true
		}
	}
}

// finish computes the results.
func (s *sim) finish() {
	n := len(s.nodes)
	for k := range s.crashes {
		c := &s.crashes[k]
		all, ok := int64(-1), true
		for r := range n {
			if s.crashT[r] >= 0 {
				continue
			}
			c.Live++
			if t := s.deadAt[k*n+r]; t < 0 {
				ok = false
			} else {
				c.Known++
				all = max(all, t)
			}
		}
		if ok && c.Live > 0 {
			c.KnownByAll = time.Duration(all)
			s.res.DetectedByAll++
		}
	}
	for i := range s.pauses {
		s.pauses[i].Suspected = len(s.pSusp[i])
		s.pauses[i].DeclaredDead = len(s.pDead[i])
	}
	s.res.Crashes = s.crashes
	s.res.Pauses = s.pauses
	s.res.FalsePositives = len(s.fpRank)
	s.res.TraceHash = s.tr.sum()
	s.res.TraceRecords = s.tr.n
}

// copyMessage copies src into dst, reusing dst's Updates storage.
func copyMessage(dst, src *swim.Message) {
	u := append(dst.Updates[:0], src.Updates...)
	*dst = *src
	dst.Updates = u
}
