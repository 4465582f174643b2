package msgr_test

import (
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/msgr/msgr1"
	"github.com/ferrymsg/ferry/msgr/msgr2"
	"github.com/ferrymsg/ferry/transport"
)

// rawV1Engine runs a msgr1 client handshake on c (no authorizer) and
// returns its engine, ready to encode messages.
func rawV1Engine(t *testing.T, c net.Conn) *msgr1.Engine {
	t.Helper()
	e := msgr1.NewEngine(msgr1.Config{Role: msgr1.Client, MyName: msg.EntityName{Type: msg.EntityClient, Num: -1},
		Nonce: 78, PeerType: msg.EntityOSD, Supported: msg.FeaturesAll, Lossy: true, GlobalSeq: 1})
	e.Start()
	for !e.Ready() {
		if out := e.Output(); len(out) > 0 {
			if _, err := c.Write(out); err != nil {
				t.Fatal(err)
			}
		}
		n, _ := e.Need()
		if n == 0 {
			t.Fatalf("msgr1 handshake stalled: %v", e.Err())
		}
		buf := make([]byte, n)
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Feed(buf); err != nil {
			t.Fatal(err)
		}
	}
	if out := e.Output(); len(out) > 0 {
		if _, err := c.Write(out); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// TestSendBudgetPausesNonReader: a peer that sends requests and never
// reads the replies is "slowed down in the kernel ... instead of growing
// the process" (budget.go): under pressure its reader stops at its share
// of Config.SendBudget, on msgr2 and on msgr1 alike. (msgr1's reader did
// not look at the budget, so the peer's replies filled the whole
// messenger-wide budget and every further Send on a connection with
// something queued failed with ErrSendBudget, other peers' too.)
func TestSendBudgetPausesNonReader(t *testing.T) {
	for _, v1 := range []bool{false, true} {
		name := "msgr2"
		if v1 {
			name = "msgr1"
		}
		t.Run(name, func(t *testing.T) { testSendBudgetPausesNonReader(t, v1) })
	}
}

func testSendBudgetPausesNonReader(t *testing.T, v1 bool) {
	const (
		budget = 16 << 20
		size   = 1 << 20
		n      = 64
	)
	s, err := msgr.New(msgr.Config{
		Name: msg.EntityName{Type: msg.EntityOSD, Num: 0}, Transports: transport.Default, Logger: quietLogger(),
		SendBudget: budget, SlowConsumerTimeout: -1, KeepaliveTimeout: -1, KeepaliveInterval: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.SetDefaultPolicy(msgr.StatelessServer())
	var mu sync.Mutex
	dispatched, budgetErrs := 0, 0
	s.AddDispatcherTail(msgr.DispatcherFunc(func(m *msg.Message) bool {
		r := msg.New(m.Header.Type)
		r.Data = m.Data
		err := m.Conn.Send(r)
		mu.Lock()
		dispatched++
		if errors.Is(err, msgr.ErrSendBudget) {
			budgetErrs++
		}
		mu.Unlock()
		return true
	}))
	listen := "tcp://127.0.0.1:0"
	if v1 {
		listen = "v1:127.0.0.1:0"
	}
	if err := s.Bind(listen); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)

	data := make([]byte, size)
	var nc net.Conn
	var frame func(seq uint64) []byte
	if v1 {
		host, _, _ := strings.Cut(strings.TrimPrefix(v1Addr(t, s), "v1:"), "/")
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.(*net.TCPConn).SetReadBuffer(64 << 10)
		e := rawV1Engine(t, c)
		nc = c
		frame = func(seq uint64) []byte {
			m := msg.New(testType)
			m.Header.Seq = seq
			m.Data = msg.Buffers{data}
			return e.AppendMessage(nil, m)
		}
	} else {
		nc = rawClient(t, s.ListenAddrs()[0])
		_ = nc.(*net.TCPConn).SetReadBuffer(64 << 10)
		frame = func(seq uint64) []byte {
			mf := msgr2.MessageFrame{Header: msgr2.Header2{Seq: seq, Type: testType, Priority: 127},
				Data: msg.Buffers{data}}
			b := mf.AppendHead(nil, true)
			b = append(b, data...)
			return mf.AppendTail(b, true)
		}
	}
	go func() {
		for i := 1; i <= n; i++ {
			if _, err := nc.Write(frame(uint64(i))); err != nil {
				return
			}
		}
	}()
	// The reader must stop at its share: wait for the pause, then for the
	// replies queued before it to settle.
	deadline := time.Now().Add(10 * time.Second)
	pauses := func() float64 { sn := s.Metrics().Snapshot(); return sn.Total("ferry_msgr_read_pauses") }
	for pauses() < 1 {
		if time.Now().After(deadline) {
			mu.Lock()
			d, be := dispatched, budgetErrs
			mu.Unlock()
			t.Fatalf("the reader never paused (%d of %d dispatched, %d replies refused with ErrSendBudget)", d, n, be)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	d, be := dispatched, budgetErrs
	mu.Unlock()
	t.Logf("%s: %d of %d 1 MiB requests from a peer that reads nothing dispatched; %d replies refused with ErrSendBudget",
		map[bool]string{false: "msgr2", true: "msgr1"}[v1], d, n, be)
	if d >= n {
		t.Errorf("all %d requests were dispatched: the reader did not stop", n)
	}
	if be > 0 {
		t.Errorf("the non-reading peer used up the messenger's send budget (%d Sends failed with ErrSendBudget): its reader was not paused at its share", be)
	}
}
