package msgr_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/transport"
	"github.com/ferrymsg/ferry/transport/inproc"
)

// seqChecker records, per sender, the counters carried in message data,
// and reports anything lost, duplicated or reordered.
type seqChecker struct {
	mu         sync.Mutex
	next       map[string]uint64
	dup, reord int
	got        atomic.Int64
}

func newSeqChecker() *seqChecker { return &seqChecker{next: make(map[string]uint64)} }

// see checks the counter n from sender.
func (s *seqChecker) see(sender string, n uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	want := s.next[sender]
	switch {
	case n == want:
		s.next[sender] = n + 1
	case n < want:
		s.dup++
	default:
		s.reord++
		s.next[sender] = n + 1
	}
	s.got.Add(1)
}

func (s *seqChecker) check(t *testing.T, sender string, sent uint64) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dup != 0 || s.reord != 0 || s.next[sender] != sent {
		t.Fatalf("%s: sent %d, received up to %d; %d duplicated, %d out of order (lost or reordered)", sender, sent, s.next[sender], s.dup, s.reord)
	}
}

func counterMsg(n uint64, size int) *msg.Message {
	m := msg.New(testType)
	b := make([]byte, 8+size)
	binary.LittleEndian.PutUint64(b, n)
	for i := 8; i < len(b); i++ {
		b[i] = byte(n) + byte(i)
	}
	m.Data = msg.Buffers{b}
	return m
}

func counterOf(t testing.TB, m *msg.Message) uint64 {
	b := m.Data.Bytes()
	if len(b) < 8 {
		t.Errorf("short message of %d bytes", len(b))
		return 0
	}
	n := binary.LittleEndian.Uint64(b)
	for i := 8; i < len(b); i++ {
		if b[i] != byte(n)+byte(i) {
			t.Errorf("message %d corrupted at byte %d", n, i)
			return n
		}
	}
	return n
}

// losslessPair starts a stateful server that checks and echoes what it
// receives, and a lossless client that checks the echoes.
func losslessPair(t *testing.T, reg *transport.Registry, listen string, scfg, ccfg msgr.Config) (srv, cli *msgr.Messenger, conn *msgr.Conn, atSrv, atCli *seqChecker) {
	t.Helper()
	return losslessPairVia(t, reg, listen, scfg, ccfg, func(addr string) string { return addr })
}

// losslessPairVia is losslessPair with the client dialling via(the
// server's address).
func losslessPairVia(t *testing.T, reg *transport.Registry, listen string, scfg, ccfg msgr.Config, via func(string) string) (srv, cli *msgr.Messenger, conn *msgr.Conn, atSrv, atCli *seqChecker) {
	t.Helper()
	atSrv, atCli = newSeqChecker(), newSeqChecker()
	scfg.Name = msg.EntityName{Type: msg.EntityOSD, Num: 1}
	scfg.Transports = reg
	if scfg.Logger == nil {
		scfg.Logger = quietLogger()
	}
	srv, err := msgr.New(scfg)
	if err != nil {
		t.Fatal(err)
	}
	srv.SetDefaultPolicy(msgr.StatefulServer())
	srv.AddDispatcherTail(msgr.DispatcherFunc(func(m *msg.Message) bool {
		atSrv.see(m.Header.Src.String(), counterOf(t, m))
		r := msg.New(testType)
		r.Data = m.Data
		_ = m.Conn.Send(r)
		return true
	}))
	if err := srv.Bind(listen); err != nil {
		t.Fatal(err)
	}
	_ = srv.Start()
	t.Cleanup(srv.Shutdown)

	ccfg.Transports = reg
	if ccfg.Logger == nil {
		ccfg.Logger = quietLogger()
	}
	cli, err = msgr.New(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	cli.SetDefaultPolicy(msgr.LosslessClient())
	cli.AddDispatcherTail(msgr.DispatcherFunc(func(m *msg.Message) bool {
		atCli.see("server", counterOf(t, m))
		return true
	}))
	_ = cli.Start()
	t.Cleanup(cli.Shutdown)
	conn, err = cli.Connect(via(srv.ListenAddrs()[0]))
	if err != nil {
		t.Fatal(err)
	}
	return
}

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestLosslessSurvivesResets resets the connection from outside many
// times while messages flow both ways; every message arrives exactly
// once, in order, unchanged.
func TestLosslessSurvivesResets(t *testing.T) {
	netw := inproc.NewNetwork()
	reg := transport.NewRegistry(netw)
	fast := msgr.Config{InitialBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond}
	_, _, conn, atSrv, atCli := losslessPair(t, reg, "inproc://osd1", fast, fast)
	const n = 10000
	stop := make(chan struct{})
	var resets atomic.Int64
	go func() {
		// Reset whenever the server has made some progress since the last
		// reset, at a random point of the stream: recovery is exercised
		// hundreds of times however fast or slow the machine is.
		last := int64(-1)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(100+rand.IntN(1000)) * time.Microsecond):
			}
			if got := atSrv.got.Load(); got > last+int64(rand.IntN(100)) {
				if netw.Reset("osd1") > 0 {
					resets.Add(1)
					last = got
				}
			}
		}
	}()
	for i := uint64(0); i < n; i++ {
		if i%100 == 0 {
			// Pace the sender: at least one reset per 200 messages.
			waitFor(t, "a reset", 30*time.Second, func() bool { return resets.Load() >= int64(i/200) })
		}
		if err := conn.Send(counterMsg(i, rand.IntN(2000))); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "all messages and echoes", 60*time.Second, func() bool {
		return atSrv.got.Load() >= n && atCli.got.Load() >= n
	})
	close(stop)
	for sender := range atSrv.next {
		atSrv.check(t, sender, n)
	}
	atCli.check(t, "server", n)
	if resets.Load() < 50 || conn.Reconnects() == 0 {
		t.Fatalf("only %d resets, %d reconnects: the test did not exercise recovery", resets.Load(), conn.Reconnects())
	}
	t.Logf("%d messages each way, %d resets, %d reconnects", n, resets.Load(), conn.Reconnects())
}

// TestLosslessInjectedFailuresTCP: the same invariant over TCP with
// Ceph-style injected socket failures on both sides.
func TestLosslessInjectedFailuresTCP(t *testing.T) {
	inj := msgr.Config{InitialBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond,
		Inject: msgr.Inject{SocketFailures: 200}}
	_, _, conn, atSrv, atCli := losslessPair(t, transport.Default, "tcp://127.0.0.1:0", inj, inj)
	const n = 5000
	for i := uint64(0); i < n; i++ {
		if err := conn.Send(counterMsg(i, rand.IntN(40000))); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "all messages and echoes", 60*time.Second, func() bool {
		return atSrv.got.Load() >= n && atCli.got.Load() >= n
	})
	for sender := range atSrv.next {
		atSrv.check(t, sender, n)
	}
	atCli.check(t, "server", n)
	if conn.Reconnects() == 0 {
		t.Fatal("no reconnects: injection did nothing")
	}
	t.Logf("%d reconnects", conn.Reconnects())
}

type events struct {
	remoteReset, refused, reset, accept, connect atomic.Int64
}

func (e *events) Dispatch(*msg.Message) bool   { return false }
func (e *events) HandleRemoteReset(*msgr.Conn) { e.remoteReset.Add(1) }
func (e *events) HandleRefused(*msgr.Conn)     { e.refused.Add(1) }
func (e *events) HandleReset(*msgr.Conn)       { e.reset.Add(1) }
func (e *events) HandleAccept(*msgr.Conn)      { e.accept.Add(1) }
func (e *events) HandleConnect(*msgr.Conn)     { e.connect.Add(1) }
func (e *events) String() string               { return fmt.Sprint(e.remoteReset.Load(), e.refused.Load()) }
func startEcho(t *testing.T, reg *transport.Registry, addr string) *msgr.Messenger {
	s, err := msgr.New(msgr.Config{Name: msg.EntityName{Type: msg.EntityOSD, Num: 2}, Transports: reg, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	s.SetDefaultPolicy(msgr.StatefulServer())
	s.AddDispatcherTail(msgr.DispatcherFunc(func(m *msg.Message) bool {
		r := msg.New(testType)
		r.Header.Tid = m.Header.Tid
		_ = m.Conn.Send(r)
		return true
	}))
	if err := s.Bind(addr); err != nil {
		t.Fatal(err)
	}
	_ = s.Start()
	return s
}

// TestRefusedThenServerStarts: a lossless client retries with backoff,
// reports each refusal, and connects once the server is up; what it queued
// meanwhile is delivered.
func TestRefusedThenServerStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := transport.NewRegistry(inproc.NewNetwork())
		ev := &events{}
		c, col := newClient(t, reg, msgr.Config{InitialBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond})
		c.SetDefaultPolicy(msgr.LosslessClient())
		c.AddDispatcherHead(ev)
		conn, _ := c.Connect("inproc://late")
		m := msg.New(testType)
		m.Header.Tid = 42
		if err := conn.Send(m); err != nil {
			t.Fatal(err)
		}
		eventually(t, "refusals", 10*time.Second, time.Millisecond, func() bool { return ev.refused.Load() >= 3 })
		s := startEcho(t, reg, "inproc://late")
		defer s.Shutdown()
		if r := recv(t, col.ch); r.Header.Tid != 42 {
			t.Fatalf("tid %d", r.Header.Tid)
		}
	})
}

// TestRemoteReset: the server restarts (losing its sessions); the client's
// reconnect is answered with SESSION_RESET and the dispatchers hear
// HandleRemoteReset; the session then starts over.
func TestRemoteReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		netw := inproc.NewNetwork()
		reg := transport.NewRegistry(netw)
		s := startEcho(t, reg, "inproc://restart")
		ev := &events{}
		c, col := newClient(t, reg, msgr.Config{InitialBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond})
		c.SetDefaultPolicy(msgr.LosslessClient())
		c.AddDispatcherHead(ev)
		conn, _ := c.Connect("inproc://restart")
		m := msg.New(testType)
		m.Header.Tid = 1
		_ = conn.Send(m)
		recv(t, col.ch)
		s.Shutdown()
		s = startEcho(t, reg, "inproc://restart")
		defer s.Shutdown()
		eventually(t, "remote reset", 10*time.Second, time.Millisecond, func() bool { return ev.remoteReset.Load() == 1 })
		m = msg.New(testType)
		m.Header.Tid = 2
		_ = conn.Send(m)
		if r := recv(t, col.ch); r.Header.Tid != 2 {
			t.Fatalf("tid %d", r.Header.Tid)
		}
	})
}

// TestStandby: a lossless_peer connection that fails with nothing to send
// waits in standby and reconnects when there is something to send.
func TestStandby(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		netw := inproc.NewNetwork()
		reg := transport.NewRegistry(netw)
		s := startEcho(t, reg, "inproc://standby")
		defer s.Shutdown()
		c, col := newClient(t, reg, msgr.Config{InitialBackoff: time.Millisecond})
		c.SetDefaultPolicy(msgr.LosslessPeer())
		conn, _ := c.Connect("inproc://standby")
		m := msg.New(testType)
		_ = conn.Send(m)
		recv(t, col.ch)
		netw.Reset("standby")
		eventually(t, "standby", 10*time.Second, time.Millisecond, func() bool { return conn.State() == "standby" })
		// A minute of virtual time with nothing to send: still standby.
		time.Sleep(time.Minute)
		synctest.Wait()
		if st := conn.State(); st != "standby" {
			t.Fatalf("state %s: reconnected with nothing to send", st)
		}
		m = msg.New(testType)
		m.Header.Tid = 9
		_ = conn.Send(m)
		if r := recv(t, col.ch); r.Header.Tid != 9 {
			t.Fatalf("tid %d", r.Header.Tid)
		}
	})
}

func TestMarkDownLossless(t *testing.T) {
	reg := transport.NewRegistry(inproc.NewNetwork())
	s := startEcho(t, reg, "inproc://md")
	defer s.Shutdown()
	c, col := newClient(t, reg, msgr.Config{})
	c.SetDefaultPolicy(msgr.LosslessClient())
	conn, _ := c.Connect("inproc://md")
	_ = conn.Send(msg.New(testType))
	recv(t, col.ch)
	conn.MarkDown()
	if err := conn.Send(msg.New(testType)); !errors.Is(err, msgr.ErrMarkedDown) {
		t.Fatalf("send after mark down: %v", err)
	}
	conn2, _ := c.Connect("inproc://md")
	if conn2 == conn {
		t.Fatal("Connect returned the marked-down connection")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := conn2.Ready(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestPolicyPresets(t *testing.T) {
	for name, want := range map[string][5]bool{
		"stateful-server":             {false, true, true, true, true},
		"stateless-registered-server": {true, true, false, false, true},
		"stateless-server":            {true, true, false, false, false},
		"lossless-peer":               {false, false, true, false, true},
		"lossless-peer-reuse":         {false, false, true, true, true},
		"lossy-client":                {true, false, false, false, true},
		"lossless-client":             {false, false, false, true, true},
	} {
		p, ok := msgr.PolicyByName(name)
		got := [5]bool{p.Lossy, p.Server, p.Standby, p.ResetCheck, p.RegisterLossyClients}
		if !ok || got != want {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
}

// Fault closes one connection with the upper layer's reason: sends fail
// with an error matching both ErrPeerFault and the reason, the
// dispatchers hear of the reset (so that the layer above can fail what
// it had on the connection), and a new connection to the peer works.
func TestFault(t *testing.T) {
	reg := transport.NewRegistry(inproc.NewNetwork())
	s := startEcho(t, reg, "inproc://fault")
	defer s.Shutdown()
	c, col := newClient(t, reg, msgr.Config{})
	conn, _ := c.Connect("inproc://fault")
	_ = conn.Send(msg.New(testType))
	recv(t, col.ch)
	reason := errors.New("a reply to nothing asked")
	conn.Fault(reason)
	conn.Fault(errors.New("a second reason")) // ignored
	if err := conn.Send(msg.New(testType)); !errors.Is(err, msgr.ErrPeerFault) || !errors.Is(err, reason) {
		t.Fatalf("send after Fault: %v", err)
	}
	if err := conn.Err(); !errors.Is(err, reason) || !strings.Contains(err.Error(), reason.Error()) {
		t.Fatalf("Err after Fault: %v", err)
	}
	select {
	case r := <-col.reset:
		if r != conn {
			t.Fatal("reset for another connection")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no reset event after Fault")
	}
	conn2, _ := c.Connect("inproc://fault")
	if conn2 == conn {
		t.Fatal("Connect returned the faulted connection")
	}
	_ = conn2.Send(msg.New(testType))
	recv(t, col.ch)
}

// TestLosslessReconnectKeepsWriting: with injected socket failures on
// both sides and internal delays at the session's race points, a
// lossless client keeps 16 messages in flight and every reply comes back
// without any socket having to time out. Keepalives are off: a socket
// left without a writer (a poke that came while a taken-over socket was
// still connecting once started a writer that gave up without saying
// so) would stall the session for good, and the test's bound fails it.
func TestLosslessReconnectKeepsWriting(t *testing.T) {
	inj := msgr.Inject{SocketFailures: 60, InternalDelays: time.Millisecond,
		DelayTypes: []msg.EntityType{msg.EntityClient, msg.EntityOSD}, DelayProbability: 0.05, DelayMax: 2 * time.Millisecond}
	srv, cli, conn, atSrv, atCli := losslessPair(t, transport.Default, "tcp://127.0.0.1:0",
		msgr.Config{Inject: inj, KeepaliveInterval: time.Hour, KeepaliveTimeout: 2 * time.Hour},
		msgr.Config{Inject: inj, KeepaliveInterval: time.Hour, KeepaliveTimeout: 2 * time.Hour})
	_ = srv
	_ = cli
	const n, window = 1500, 16
	sent := uint64(0)
	for ; sent < window; sent++ {
		if err := conn.Send(counterMsg(sent, 64)); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for atCli.got.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d replies after 30 s (%d reconnects): the session stalled", atCli.got.Load(), n, conn.Reconnects())
		}
		for sent < n && sent-uint64(atCli.got.Load()) < window {
			if err := conn.Send(counterMsg(sent, 64)); err != nil {
				t.Fatal(err)
			}
			sent++
		}
		time.Sleep(time.Millisecond)
	}
	for sender := range atSrv.next {
		atSrv.check(t, sender, n)
	}
	atCli.check(t, "server", n)
	if conn.Reconnects() == 0 {
		t.Fatal("no socket failed: the test exercised nothing")
	}
}
