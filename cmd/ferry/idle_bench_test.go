package main

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/ceph"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
)

// idleClient is one client messenger of BenchmarkIdleConnections.
type idleClient struct {
	m     *msgr.Messenger
	reply chan struct{}
}

func (c *idleClient) Dispatch(m *msg.Message) bool {
	if m.Header.Type != ceph.MsgPing {
		return false
	}
	m.Done()
	select {
	case c.reply <- struct{}{}:
	default:
	}
	return true
}

// BenchmarkIdleConnections measures what an established idle connection
// costs each side in resident memory: a `ferry serve` process and, in
// this process, FERRY_IDLE_CONNS (default 10000) lossy client messengers
// that each connect, exchange one MPing and then sit idle. Both sides'
// VmRSS growth per connection is reported (GC headroom included, as an
// operator sees it). The client side is measured against the same
// messengers before they connected, so a messenger's own cost is not
// counted. Run with -benchtime 1x:
//
//	go test -run '^$' -bench IdleConnections -benchtime 1x ./cmd/ferry
func BenchmarkIdleConnections(b *testing.B) {
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("FERRY_IDLE_CONNS")); err == nil && v > 0 {
		n = v
	}
	for range b.N {
		srv := startServe(b)
		pid := srv.cmd.Process.Pid
		settle := func() { time.Sleep(4 * time.Second) }
		clients := make([]*idleClient, n)
		for i := range clients {
			m, err := msgr.New(msgr.Config{Logger: quietLog})
			if err != nil {
				b.Fatal(err)
			}
			m.SetDefaultPolicy(msgr.LossyClient())
			c := &idleClient{m: m, reply: make(chan struct{}, 1)}
			m.AddDispatcherTail(c)
			if err := m.Start(); err != nil {
				b.Fatal(err)
			}
			clients[i] = c
		}
		defer func() {
			for _, c := range clients {
				c.m.Shutdown()
			}
		}()
		runtime.GC()
		settle()
		cli0, srv0 := procKB(b, os.Getpid(), "VmRSS"), procKB(b, pid, "VmRSS")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		start := time.Now()
		for i, c := range clients {
			conn, err := c.m.Connect(srv.addr)
			if err != nil {
				b.Fatal(err)
			}
			if err := conn.Send((&ceph.Ping{}).Marshal()); err != nil {
				b.Fatal(err)
			}
			select {
			case <-c.reply:
			case <-ctx.Done():
				b.Fatalf("connection %d: no ping reply: %v", i, ctx.Err())
			}
		}
		cancel()
		setup := time.Since(start)
		settle()
		cli1, srv1 := procKB(b, os.Getpid(), "VmRSS"), procKB(b, pid, "VmRSS")
		b.ReportMetric(float64(cli1-cli0)/float64(n), "client-KiB/conn")
		b.ReportMetric(float64(srv1-srv0)/float64(n), "server-KiB/conn")
		b.ReportMetric(float64(n), "conns")
		b.ReportMetric(setup.Seconds(), "setup-s")
	}
}
