package main

import (
	"context"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/ceph"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
)

// In-process tests of `ferry ping --verify`: the counters, the accounting
// of lost, duplicated and reordered echoes, and riding out resets.

// TestEchoTrackerMatchesReference checks echoTracker against a naive
// reference on random echo sequences.
func TestEchoTrackerMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 500; trial++ {
		n := 1 + r.IntN(30)
		var echoes []uint64
		for range r.IntN(2 * n) {
			echoes = append(echoes, uint64(1+r.IntN(n)))
		}
		tr := &echoTracker{seen: make([]bool, n+1)}
		for _, c := range echoes {
			tr.echo(c)
		}
		// Reference: a duplicate is any echo of a counter already echoed;
		// a reordered echo is the first of a counter below some counter
		// echoed before it.
		var dup, reord int
		for i, c := range echoes {
			seenBefore, higherBefore := false, false
			for _, d := range echoes[:i] {
				seenBefore = seenBefore || d == c
				higherBefore = higherBefore || d > c
			}
			switch {
			case seenBefore:
				dup++
			case higherBefore:
				reord++
			}
		}
		if tr.duplicated != dup || tr.reordered != reord {
			t.Fatalf("echoes %v: tracker %d duplicated %d reordered, reference %d, %d", echoes, tr.duplicated, tr.reordered, dup, reord)
		}
	}
}

func TestCounterOf(t *testing.T) {
	pc := &pingClient{}
	for _, size := range []int{8, 9, 100, 70000} {
		for _, c := range []uint64{1, 2, 250, 251, 1 << 40} {
			got, ok := counterOf(pc.requestData(c, size))
			if !ok || got != c {
				t.Errorf("size %d counter %d: got %d, %v", size, c, got, ok)
			}
		}
	}
	// The counter split across buffers.
	if got, ok := counterOf(msg.Buffers{{1, 0, 0}, {0, 0}, {0, 0, 0, 9}}); !ok || got != 1 {
		t.Errorf("split counter: %d, %v", got, ok)
	}
	if _, ok := counterOf(msg.Buffers{{1, 2, 3}}); ok {
		t.Error("a 3-byte data segment has no counter")
	}
}

// echoServer starts a mon-named messenger with policy pol whose MPing
// handling is h (which replies with reply).
func echoServer(t *testing.T, listen string, pol msgr.Policy, h func(req *msg.Message, reply func(*msg.Message))) *msgr.Messenger {
	t.Helper()
	m, err := msgr.New(msgr.Config{Name: defaultIdentity(), ZeroNonce: true, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	m.SetDefaultPolicy(pol)
	m.AddDispatcherTail(msgr.DispatcherFunc(func(r *msg.Message) bool {
		if r.Header.Type != ceph.MsgPing {
			return false
		}
		h(r, func(rep *msg.Message) { _ = r.Conn.Send(rep) })
		return true
	}))
	if err := m.Bind(listen); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Shutdown)
	return m
}

func echoOf(req *msg.Message) *msg.Message {
	r := ceph.PingReply(nil)
	r.Header.Tid = req.Header.Tid
	r.Data = req.Data
	return r
}

func TestVerifyCountsDuplicatesAndReordering(t *testing.T) {
	var mu sync.Mutex
	var held *msg.Message
	n := 0
	srv := echoServer(t, "tcp://127.0.0.1:0", msgr.StatelessServer(), func(req *msg.Message, reply func(*msg.Message)) {
		mu.Lock()
		defer mu.Unlock()
		n++
		switch {
		case n == 3:
			// Echo 3 twice.
			reply(echoOf(req))
			reply(echoOf(req))
		case n == 5:
			held = req // echoed after 6
		case n == 6:
			reply(echoOf(req))
			reply(echoOf(held))
		default:
			reply(echoOf(req))
		}
	})
	pc := dialTest(t, srv.Addrs()[0].String())
	// A window of 4 lets 6 go out while 5 is held.
	res := runTest(t, pc, pingOptions{Count: 10, Size: 16, Inflight: 4, Verify: true}, 30*time.Second)
	if res.Err != nil || res.OK != 10 || res.Lost != 0 || res.Duplicated != 1 || res.Reordered != 1 || res.Unexpected != 0 {
		t.Errorf("ok %d lost %d duplicated %d reordered %d unexpected %d err %v; want 10, 0, 1, 1, 0, nil",
			res.OK, res.Lost, res.Duplicated, res.Reordered, res.Unexpected, res.Err)
	}
	if res.Errors() != 2 || res.firstError() == nil {
		t.Errorf("errors %d (%v): a duplicate and a reordered echo are errors", res.Errors(), res.firstError())
	}
}

func TestVerifyReportsLostAtTimeout(t *testing.T) {
	srv := echoServer(t, "tcp://127.0.0.1:0", msgr.StatelessServer(), func(req *msg.Message, reply func(*msg.Message)) {
		if c, _ := counterOf(req.Data); c != 7 && c != 9 {
			reply(echoOf(req))
		}
	})
	pc := dialTest(t, srv.Addrs()[0].String())
	res := runTest(t, pc, pingOptions{Count: 20, Size: 0, Inflight: 4, Verify: true}, time.Second)
	if res.Err == nil || res.Sent != 20 || res.OK != 18 || res.Lost != 2 || res.Duplicated != 0 || res.Reordered != 0 {
		t.Errorf("err %v sent %d ok %d lost %d dup %d reord %d; want a timeout, 20, 18, 2, 0, 0",
			res.Err, res.Sent, res.OK, res.Lost, res.Duplicated, res.Reordered)
	}
	if r := newPingReport(res, pingOptions{Count: 20, Verify: true}, "", ""); r.Duplicated == nil || r.Reordered == nil || r.Lost != 2 {
		t.Errorf("report %+v: want lost, duplicated and reordered", r)
	}
	// Without --verify the report has no duplicated/reordered fields.
	if r := newPingReport(&pingResult{}, pingOptions{Count: 1}, "", ""); r.Duplicated != nil || r.Reordered != nil {
		t.Error("duplicated/reordered reported without --verify")
	}
}

// TestVerifyLossyRidesOutResets: the server marks the connection down on
// every 25th ping without answering it. A lossy client with --verify
// reconnects each time, counts the pings in flight as lost, and finishes.
func TestVerifyLossyRidesOutResets(t *testing.T) {
	var n atomic.Int64
	srv := echoServer(t, "tcp://127.0.0.1:0", msgr.StatelessServer(), func(req *msg.Message, reply func(*msg.Message)) {
		if n.Add(1)%25 == 0 {
			req.Conn.(*msgr.Conn).MarkDown()
			return
		}
		reply(echoOf(req))
	})
	pc := dialTest(t, srv.Addrs()[0].String())
	const count = 500
	res := runTest(t, pc, pingOptions{Count: count, Size: 100, Inflight: 8, Verify: true}, 60*time.Second)
	if res.Err != nil {
		t.Fatalf("run stopped: %v", res.Err)
	}
	if res.Sent != count || res.OK+res.Lost != count || res.Duplicated != 0 || res.Mismatches != 0 || res.Unexpected != 0 {
		t.Errorf("sent %d ok %d lost %d dup %d mismatches %d unexpected %d: every ping sent is echoed once or lost",
			res.Sent, res.OK, res.Lost, res.Duplicated, res.Mismatches, res.Unexpected)
	}
	// One mark-down per 25 pings the server received (some of the pings
	// in flight at a reset never reach it); each loses at least the ping
	// that triggered it.
	if res.Resets < 5 || res.Resets > count/25 || res.Reconnects != uint64(res.Resets) || res.Lost < res.Resets {
		t.Errorf("resets %d reconnects %d lost %d: want 5 to %d resets, one reconnect and at least one loss each",
			res.Resets, res.Reconnects, res.Lost, count/25)
	}
	if res.Errors() == 0 {
		t.Error("losses are errors")
	}
}

// TestLosslessRemoteResetGivesUpInFlight: the server restarts on the
// same address while pings are in flight (losing its sessions). The
// lossless client's reconnect is answered with a session reset; ping
// hears HandleRemoteReset, gives up the pings in flight (lost) and goes
// on with the new session.
func TestLosslessRemoteResetGivesUpInFlight(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := "tcp://" + l.Addr().String()
	l.Close()
	stalled := make(chan struct{})
	var once sync.Once
	first := echoServer(t, listen, msgr.StatefulServer(), func(req *msg.Message, reply func(*msg.Message)) {
		if c, _ := counterOf(req.Data); c >= 40 {
			once.Do(func() { close(stalled) }) // hold everything from 40 on
			return
		}
		reply(echoOf(req))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts := defaultMsgrOptions("lossless-client")
	opts.InitialBackoff, opts.MaxBackoff = 5*time.Millisecond, 50*time.Millisecond
	pc, err := dialPingWith(ctx, listen, quietLog, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pc.Close)
	done := make(chan *pingResult, 1)
	go func() { done <- pc.run(ctx, pingOptions{Count: 200, Size: 64, Inflight: 8, Verify: true}) }()
	select {
	case <-stalled:
	case <-ctx.Done():
		t.Fatal("the run never reached ping 40")
	}
	first.Shutdown()
	echoServer(t, listen, msgr.StatefulServer(), func(req *msg.Message, reply func(*msg.Message)) { reply(echoOf(req)) })
	res := <-done
	if res.Err != nil {
		t.Fatalf("run stopped: %v", res.Err)
	}
	if res.Resets != 1 || res.Lost < 1 || res.Lost > 8 || res.OK+res.Lost != 200 || res.Duplicated != 0 || res.Reordered != 0 {
		t.Errorf("resets %d lost %d ok %d dup %d reord %d: want 1 remote reset losing the (at most 8) pings in flight",
			res.Resets, res.Lost, res.OK, res.Duplicated, res.Reordered)
	}
	if res.Reconnects < 1 {
		t.Errorf("reconnects %d, want at least 1", res.Reconnects)
	}
}
