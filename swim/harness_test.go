package swim

import (
	"container/heap"
	"math/rand/v2"
	"testing"
	"time"
)

// cluster is a small in-process network of machines on a virtual clock:
// a lossless (unless loss > 0) exchange with a fixed latency plus jitter,
// deliveries and ticks ordered by (time, sequence), so a seed gives one run.
type cluster struct {
	t       testing.TB
	ms      []*Machine
	crashed []bool
	paused  []bool
	rnd     *rand.Rand
	now     time.Duration
	q       evq
	seq     uint64
	loss    float64
	latency time.Duration
	// dead[i][j]: the time machine i first saw j dead (0: not yet).
	dead   [][]time.Duration
	events []Event
	owner  []int // owner[k]: machine index of events[k]
	sent   int
}

type ev struct {
	at   time.Duration
	seq  uint64
	to   int
	from ID
	msg  *Message // nil: a tick
}

type evq []ev

func (q evq) Len() int { return len(q) }
func (q evq) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q evq) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *evq) Push(x any)   { *q = append(*q, x.(ev)) }
func (q *evq) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

func newCluster(t testing.TB, n int, cfg Config, seed uint64) *cluster {
	c := &cluster{t: t, rnd: rand.New(rand.NewPCG(seed, 1)), latency: time.Millisecond}
	for i := range n {
		m := New(ID(i), cfg, rand.New(rand.NewPCG(seed, uint64(i)+100)))
		for j := range n {
			if j != i {
				m.Add(ID(j), 0)
			}
		}
		c.ms = append(c.ms, m)
		c.crashed = append(c.crashed, false)
		c.paused = append(c.paused, false)
		c.dead = append(c.dead, make([]time.Duration, n))
		c.schedule(ev{at: 0, to: i})
	}
	return c
}

func (c *cluster) schedule(e ev) {
	c.seq++
	e.seq = c.seq
	heap.Push(&c.q, e)
}

// flush moves machine i's outbox into the network and records its events.
func (c *cluster) flush(i int) {
	m := c.ms[i]
	for _, env := range m.Outbox() {
		c.sent++
		if c.loss > 0 && c.rnd.Float64() < c.loss {
			continue
		}
		// Copy: the outbox is reused.
		msg := env.Msg
		msg.Updates = append([]Update(nil), env.Msg.Updates...)
		// Round-trip through the wire encoding.
		var dec Message
		if err := DecodeMessage(msg.Append(nil), &dec); err != nil {
			c.t.Fatalf("encode/decode: %v", err)
		}
		lat := c.latency + time.Duration(c.rnd.Int64N(int64(c.latency)+1))
		c.schedule(ev{at: c.now + lat, to: int(env.To), from: m.self, msg: &dec})
	}
	for _, e := range m.Events() {
		c.events = append(c.events, e)
		c.owner = append(c.owner, i)
		if e.State == Dead && c.dead[i][e.ID] == 0 {
			c.dead[i][e.ID] = e.Time
		}
		if e.State == Alive {
			c.dead[i][e.ID] = 0
		}
	}
	c.schedule(ev{at: m.Next(), to: i})
}

// run processes events until the virtual time passes until.
func (c *cluster) run(until time.Duration) {
	for c.q.Len() > 0 {
		if c.q[0].at > until {
			c.now = until
			return
		}
		e := heap.Pop(&c.q).(ev)
		c.now = e.at
		if e.to < 0 || e.to >= len(c.ms) || c.crashed[e.to] {
			continue
		}
		if c.paused[e.to] {
			if e.msg != nil {
				// A paused process's socket buffers the message.
				e.at = -1
			}
			continue
		}
		m := c.ms[e.to]
		if e.msg == nil {
			if e.at < m.Next() {
				continue // a stale tick
			}
			m.Tick(c.now)
		} else {
			m.Receive(c.now, e.from, e.msg)
		}
		c.flush(e.to)
	}
	c.now = until
}

// resume restarts a paused machine: it ticks at once.
func (c *cluster) resume(i int) {
	c.paused[i] = false
	c.ms[i].Tick(c.now)
	c.flush(i)
}

// allSeeDead reports when every live machine had id dead (0, false if not).
func (c *cluster) allSeeDead(id int) (time.Duration, bool) {
	var last time.Duration
	for i := range c.ms {
		if i == id || c.crashed[i] {
			continue
		}
		st, _ := c.ms[i].State(ID(id))
		if st.State != Dead {
			return 0, false
		}
		last = max(last, c.dead[i][id])
	}
	return last, true
}

// falseDeaths counts live members some live machine holds dead.
func (c *cluster) falseDeaths() int {
	n := 0
	for i, m := range c.ms {
		if c.crashed[i] {
			continue
		}
		for j := range c.ms {
			if j == i || c.crashed[j] {
				continue
			}
			if st, _ := m.State(ID(j)); st.State == Dead {
				n++
			}
		}
	}
	return n
}

// TestClusterCrashDetected: 2 to 16 machines, one crashes; every live
// machine declares it dead within DetectionTime's bound (and within 30 s),
// and no live machine is ever declared dead.
func TestClusterCrashDetected(t *testing.T) {
	for _, n := range []int{2, 3, 5, 8, 16} {
		testCrash(t, n)
	}
}

func testCrash(t *testing.T, n int) {
	bound := DetectionTime(Config{}, n).Bound()
	var worst time.Duration
	for seed := range uint64(20) {
		c := newCluster(t, n, Config{}, seed)
		c.run(10 * time.Second)
		victim := int(seed) % n
		crashAt := c.now
		c.crashed[victim] = true
		c.run(crashAt + bound + time.Second)
		at, ok := c.allSeeDead(victim)
		if !ok {
			t.Fatalf("seed %d: victim %d not dead everywhere after %v", seed, victim, bound)
		}
		d := at - crashAt
		worst = max(worst, d)
		if d > bound || d > 30*time.Second {
			t.Fatalf("seed %d: known dead to all after %v (bound %v)", seed, d, bound)
		}
		for k, e := range c.events {
			if e.State == Dead && int(e.ID) != victim {
				t.Fatalf("seed %d: machine %d declared live %d dead: %+v", seed, c.owner[k], e.ID, e)
			}
		}
		if f := c.falseDeaths(); f != 0 {
			t.Fatalf("seed %d: %d false deaths", seed, f)
		}
	}
	t.Logf("n=%d: worst time to dead-at-all over 20 runs: %v (bound %v)", n, worst, bound)
}

// deadEvents counts Dead events about member id.
func (c *cluster) deadEvents(id int) int {
	n := 0
	for _, e := range c.events {
		if e.State == Dead && int(e.ID) == id {
			n++
		}
	}
	return n
}

// TestClusterLossNoFalsePositive: 32 machines, 1% message loss, 5
// simulated minutes: no live member is ever declared dead; two crashes
// are known dead to all within the bound.
func TestClusterLossNoFalsePositive(t *testing.T) {
	const n = 32
	bound := DetectionTime(Config{}, n).Worst
	for seed := range uint64(3) {
		c := newCluster(t, n, Config{}, seed)
		c.loss = 0.01
		c.run(2 * time.Minute)
		c.crashed[3], c.crashed[17] = true, true
		crashAt := c.now
		c.run(5 * time.Minute)
		for _, v := range []int{3, 17} {
			at, ok := c.allSeeDead(v)
			if !ok || at-crashAt > bound {
				t.Fatalf("seed %d: crash %d known dead to all: %v %v (bound %v)", seed, v, ok, at-crashAt, bound)
			}
		}
		for k, e := range c.events {
			if e.State == Dead && e.ID != 3 && e.ID != 17 {
				t.Fatalf("seed %d: machine %d declared live %d dead at %v", seed, c.owner[k], e.ID, e.Time)
			}
		}
		var sus uint64
		for _, m := range c.ms {
			sus += m.Stats().Suspicions
		}
		t.Logf("seed %d: %d messages, %.2f per member per second; %d suspicions raised", seed, c.sent, float64(c.sent)/n/300, sus)
	}
}

// TestClusterPauseRefutes: a member stopped for just under the confirmed
// suspicion timeout (its messages lost meanwhile), then resumed, is
// suspected but refutes and is never declared dead; it was not accusing
// anyone for its own absence either.
func TestClusterPauseRefutes(t *testing.T) {
	for _, n := range []int{5, 16, 64} {
		pause := Config{}.SuspicionTimeoutFor(n, 2) - 100*time.Millisecond
		seeds := uint64(12)
		if n > 16 {
			seeds = 4
		}
		for seed := range seeds {
			testPause(t, n, seed, pause)
		}
	}
}

func testPause(t *testing.T, n int, seed uint64, pause time.Duration) {
	{
		c := newCluster(t, n, Config{}, seed)
		c.run(20 * time.Second)
		v := int(seed) % n
		c.paused[v] = true
		c.run(c.now + pause)
		c.resume(v)
		c.run(c.now + 30*time.Second) // past any suspicion timeout
		if d := c.deadEvents(v); d != 0 {
			t.Fatalf("n %d seed %d: member paused for %v declared dead %d times", n, seed, pause, d)
		}
		if f := c.falseDeaths(); f != 0 {
			t.Fatalf("seed %d: %d false deaths", seed, f)
		}
		if c.ms[v].Stats().Stalls == 0 {
			t.Fatalf("seed %d: the paused member did not see its own delay", seed)
		}
		if c.ms[v].Stats().Suspicions != 0 {
			t.Fatalf("seed %d: the paused member accused others", seed)
		}
	}
}

// TestClusterDeterministic: one seed, one event trace.
func TestClusterDeterministic(t *testing.T) {
	trace := func() []Event {
		c := newCluster(t, 12, Config{}, 42)
		c.loss = 0.02
		c.run(10 * time.Second)
		c.crashed[5] = true
		c.run(time.Minute)
		return c.events
	}
	a, b := trace(), trace()
	if len(a) == 0 || len(a) != len(b) {
		t.Fatalf("traces of %d and %d events", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("event %d: %+v vs %+v", i, a[i], b[i])
		}
	}
}
