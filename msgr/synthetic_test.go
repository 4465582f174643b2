package msgr_test

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/transport"
	"github.com/ferrymsg/ferry/transport/inproc"
)

// The synthetic stress test, in the spirit of Ceph's SyntheticTest and
// SyntheticInjectTest: several servers and clients, thousands of random
// operations (connect, send with random sizes and priorities, mark down,
// resets from the network, injected socket failures and delays), then the
// invariants:
//   - lossless sessions: every message arrives exactly once, in order
//     within its priority, byte-identical;
//   - lossy sessions: nothing is duplicated or reordered, and a message is
//     lost only on a connection that was reset (HandleReset) or marked down.

// stream identifies one ordered stream: a client's messages to a server
// at one priority, within one connection epoch (a new epoch starts when a
// connection is replaced after a mark down or a lossy reset).
type stream struct {
	client, server, epoch int
	prio                  msg.Priority
}

const synthHdr = 24

func synthMsg(s stream, n uint64, size int) *msg.Message {
	b := make([]byte, synthHdr+size)
	binary.LittleEndian.PutUint32(b[0:], uint32(s.client))
	binary.LittleEndian.PutUint32(b[4:], uint32(s.server))
	binary.LittleEndian.PutUint32(b[8:], uint32(s.epoch))
	binary.LittleEndian.PutUint16(b[12:], uint16(s.prio))
	binary.LittleEndian.PutUint64(b[16:], n)
	for i := synthHdr; i < len(b); i++ {
		b[i] = byte(n*7) + byte(i)
	}
	m := msg.New(testType)
	m.Header.Priority = s.prio
	// Split the payload across front and data, and the data across
	// buffers, to exercise every segment.
	cut := min(len(b), synthHdr+rand.IntN(64))
	m.Front = msg.Buffers{b[:synthHdr]}
	rest := b[synthHdr:]
	_ = cut
	if len(rest) > 0 {
		half := len(rest) / 2
		m.Data = msg.Buffers{rest[:half], rest[half:]}
	}
	return m
}

type synthState struct {
	mu       sync.Mutex
	sent     map[stream]uint64 // next counter per stream
	next     map[stream]uint64 // next counter expected per stream
	received map[stream]uint64 // how many arrived per stream
	dups     int
	reorder  int
	corrupt  int
}

func (st *synthState) record(t *testing.T, m *msg.Message) {
	h := m.Front.Bytes()
	if len(h) != synthHdr {
		st.mu.Lock()
		st.corrupt++
		st.mu.Unlock()
		return
	}
	s := stream{
		client: int(binary.LittleEndian.Uint32(h[0:])),
		server: int(binary.LittleEndian.Uint32(h[4:])),
		epoch:  int(binary.LittleEndian.Uint32(h[8:])),
		prio:   msg.Priority(binary.LittleEndian.Uint16(h[12:])),
	}
	n := binary.LittleEndian.Uint64(h[16:])
	data := m.Data.Bytes()
	bad := m.Header.Priority != s.prio
	for i, c := range data {
		if c != byte(n*7)+byte(i+synthHdr) {
			bad = true
			break
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if bad {
		st.corrupt++
	}
	want := st.next[s]
	switch {
	case n == want:
	case n < want:
		st.dups++
		return
	default:
		// A gap: acceptable only on lossy streams (checked at the end by
		// counting), never a step backwards.
	}
	st.next[s] = n + 1
	st.received[s]++
}

type synthClient struct {
	m        *msgr.Messenger
	lossless bool
	mu       sync.Mutex
	conns    map[int]*msgr.Conn // by server index
	epoch    map[int]int
	byEpoch  map[[2]int]*msgr.Conn // (server, epoch) -> its connection
	reset    map[*msgr.Conn]bool   // conns that saw HandleReset or a mark down

	remoteResets int
}

func (c *synthClient) HandleReset(conn *msgr.Conn) {
	c.mu.Lock()
	c.reset[conn] = true
	c.mu.Unlock()
}
func (c *synthClient) Dispatch(*msg.Message) bool { return true }

// HandleRemoteReset: the server lost the session. That must not happen
// here (no server restarts), so it is recorded as a failure.
func (c *synthClient) HandleRemoteReset(conn *msgr.Conn) {
	c.mu.Lock()
	c.remoteResets++
	c.mu.Unlock()
}

func runSynthetic(t *testing.T, ops int, inject msgr.Inject) {
	netw := inproc.NewNetwork()
	reg := transport.NewRegistry(netw)
	st := &synthState{sent: map[stream]uint64{}, next: map[stream]uint64{}, received: map[stream]uint64{}}
	base := msgr.Config{Transports: reg, Logger: quietLogger(), InitialBackoff: time.Millisecond, MaxBackoff: 50 * time.Millisecond, Inject: inject}

	const nServers, nClients = 3, 6
	var servers []*msgr.Messenger
	var addrs []string
	for i := 0; i < nServers; i++ {
		cfg := base
		cfg.Name = msg.EntityName{Type: msg.EntityOSD, Num: int64(i)}
		s, err := msgr.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		s.SetPolicy(msg.EntityClient, msgr.StatelessServer()) // lossy clients
		s.SetPolicy(msg.EntityMDS, msgr.StatefulServer())     // lossless clients
		s.AddDispatcherTail(msgr.DispatcherFunc(func(m *msg.Message) bool {
			st.record(t, m)
			return true
		}))
		if err := s.Bind(fmt.Sprintf("inproc://osd%d", i)); err != nil {
			t.Fatal(err)
		}
		_ = s.Start()
		defer s.Shutdown()
		servers = append(servers, s)
		addrs = append(addrs, s.ListenAddrs()[0])
	}
	var clients []*synthClient
	for i := 0; i < nClients; i++ {
		cfg := base
		lossless := i%2 == 0
		cfg.Name = msg.EntityName{Type: msg.EntityClient, Num: msg.NewID}
		if lossless {
			cfg.Name.Type = msg.EntityMDS
		}
		m, err := msgr.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		c := &synthClient{m: m, lossless: lossless, conns: map[int]*msgr.Conn{}, epoch: map[int]int{},
			byEpoch: map[[2]int]*msgr.Conn{}, reset: map[*msgr.Conn]bool{}}
		if lossless {
			m.SetDefaultPolicy(msgr.LosslessClient())
		} else {
			m.SetDefaultPolicy(msgr.LossyClient())
		}
		m.AddDispatcherTail(c)
		_ = m.Start()
		defer m.Shutdown()
		clients = append(clients, c)
	}
	// connFor returns the client's connection to server s, opening a new
	// one (and a new epoch) if the last one closed.
	connFor := func(ci, si int) (*msgr.Conn, int) {
		c := clients[ci]
		c.mu.Lock()
		defer c.mu.Unlock()
		conn := c.conns[si]
		if conn == nil || conn.Err() != nil {
			if conn != nil {
				c.epoch[si]++
			}
			var err error
			conn, err = c.m.Connect(addrs[si])
			if err != nil {
				t.Fatal(err)
			}
			c.conns[si] = conn
			c.byEpoch[[2]int{si, c.epoch[si]}] = conn
		}
		return conn, c.epoch[si]
	}
	prios := []msg.Priority{msg.PrioLow, msg.PrioDefault, msg.PrioHigh, msg.PrioHighest}
	var sentTotal int
	deadline := time.Now().Add(60 * time.Second)
	for op := 0; op < ops && time.Now().Before(deadline); op++ {
		ci, si := rand.IntN(nClients), rand.IntN(nServers)
		switch r := rand.IntN(100); {
		case r < 90: // send
			conn, epoch := connFor(ci, si)
			s := stream{client: ci, server: si, epoch: epoch, prio: prios[rand.IntN(len(prios))]}
			st.mu.Lock()
			n := st.sent[s]
			st.sent[s] = n + 1
			st.mu.Unlock()
			size := rand.IntN(4096)
			if rand.IntN(50) == 0 {
				size = 64<<10 + rand.IntN(256<<10)
			}
			if err := conn.Send(synthMsg(s, n, size)); err != nil {
				// A lossy connection that just closed: the message is lost
				// with a reset on record.
				st.mu.Lock()
				st.sent[s] = n
				st.mu.Unlock()
			}
			sentTotal++
		case r < 91: // mark down (drops the session: a new epoch follows)
			c := clients[ci]
			c.mu.Lock()
			if conn := c.conns[si]; conn != nil {
				c.reset[conn] = true
				conn.MarkDown()
			}
			c.mu.Unlock()
		case r < 99: // reset a server's connections from the network
			netw.Reset(fmt.Sprintf("osd%d", si))
		default:
			time.Sleep(time.Millisecond)
		}
	}

	// Wait until every stream is complete or its connection has closed
	// and, for a lossy one, its reset has been reported.
	excused := func(s stream) bool {
		c := clients[s.client]
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.reset[c.byEpoch[[2]int{s.server, s.epoch}]]
	}
	complete := func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		for s, n := range st.sent {
			if st.received[s] != n && !excused(s) {
				return false
			}
		}
		return true
	}
	end := time.Now().Add(30 * time.Second)
	for !complete() {
		if time.Now().After(end) {
			st.mu.Lock()
			for s, n := range st.sent {
				if st.received[s] != n && !excused(s) {
					c := clients[s.client]
					c.mu.Lock()
					conn := c.byEpoch[[2]int{s.server, s.epoch}]
					c.mu.Unlock()
					t.Errorf("incomplete %+v lossless=%v: sent %d received %d; conn state %s err %v reconnects %d",
						s, c.lossless, n, st.received[s], conn.State(), conn.Err(), conn.Reconnects())
				}
			}
			st.mu.Unlock()
			for i, c := range clients {
				t.Logf("client %d remote resets %d", i, c.remoteResets)
			}
			t.FailNow()
		}
		time.Sleep(5 * time.Millisecond)
	}

	for i, c := range clients {
		c.mu.Lock()
		if c.remoteResets != 0 {
			t.Errorf("client %d saw %d remote resets", i, c.remoteResets)
		}
		c.mu.Unlock()
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.dups != 0 || st.corrupt != 0 {
		t.Fatalf("%d duplicated, %d corrupted messages", st.dups, st.corrupt)
	}
	lostLossy, lostMarked := 0, 0
	var losslessSent, losslessGot uint64
	for s, n := range st.sent {
		got := st.received[s]
		if clients[s.client].lossless {
			losslessSent += n
			losslessGot += got
		}
		if got == n {
			continue
		}
		c := clients[s.client]
		excused := excused(s)
		switch {
		case c.lossless && excused:
			lostMarked += int(n - got)
		case c.lossless:
			t.Errorf("lossless stream %+v: sent %d, received %d", s, n, got)
		case !excused:
			t.Errorf("lossy stream %+v lost %d messages without a reset", s, n-got)
		default:
			lostLossy += int(n - got)
		}
	}
	t.Logf("%d sends (%d on lossless sessions, %d delivered); lost on lossy resets %d, on marked-down lossless sessions %d; no duplicates, no reordering, no corruption",
		sentTotal, losslessSent, losslessGot, lostLossy, lostMarked)
}

func TestSynthetic(t *testing.T) {
	runSynthetic(t, 20000, msgr.Inject{})
}

func TestSyntheticInject(t *testing.T) {
	runSynthetic(t, 10000, msgr.Inject{SocketFailures: 100, DelayTypes: []msg.EntityType{msg.EntityClient, msg.EntityMDS},
		DelayProbability: 0.01, DelayMax: 5 * time.Millisecond, InternalDelays: time.Millisecond})
}
