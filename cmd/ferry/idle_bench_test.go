package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/ceph"
	"github.com/ferrymsg/ferry/metrics"
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
// operator sees it).
//
// The client needs a messenger per connection (one messenger has one
// session with a given server), measured against the same messengers
// before they connected, so that a messenger's own cost is not counted.
// But a messenger's first connection also grows what is the messenger's:
// its dispatch goroutine's stack (grown by the first message), its
// dispatch queue's levels, its maps' first buckets; a process holding
// 10,000 connections has those once. With FERRY_IDLE_WARM=1 each
// messenger first connects to a second `ferry serve` (not measured), and
// the figures are the growth from every messenger's second connection,
// while the first ones sit idle too: the client figure without the
// messengers' part. That takes two sockets per messenger: at most about
// 9,900 connections under a limit of 20,000 open files. The messengers'
// heap also sets the client's GC goal (twice the live heap at GOGC=100),
// so garbage made while the connections are set up stays resident on
// the client longer than in a process with one messenger:
// FERRY_IDLE_CLIENT_GOGC=N sets this process's GC percentage from the
// baseline on, to show how much of the client's figure that is. Run with
// -benchtime 1x:
//
//	go test -run '^$' -bench IdleConnections -benchtime 1x ./cmd/ferry
//
// With FERRY_IDLE_PROFILE=DIR it also reports, for each side, the growth
// of the Go heap in use and of goroutine stacks in use per connection
// (runtime.MemStats after a GC, taken after the resident figures) and
// how many goroutines each connection keeps, and writes both sides' heap
// profiles (DIR/client.heap, DIR/server.heap: `go tool pprof -top
// -sample_index=inuse_space FILE`) and goroutine dumps (DIR/*.goroutines).
func BenchmarkIdleConnections(b *testing.B) {
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("FERRY_IDLE_CONNS")); err == nil && v > 0 {
		n = v
	}
	profDir := os.Getenv("FERRY_IDLE_PROFILE")
	if profDir != "" {
		// Sample every KiB, not every 512: a connection's allocations
		// are mostly small, and the profiles are divided by 10,000.
		defer func(r int) { runtime.MemProfileRate = r }(runtime.MemProfileRate)
		runtime.MemProfileRate = 1024
	}
	for range b.N {
		var extra []string
		var srvDebug string // the server's /debug/pprof/ URL
		if profDir != "" {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			a := l.Addr().String()
			_ = l.Close()
			extra = []string{"--metrics", a}
			srvDebug = "http://" + a + "/debug/pprof/"
		}
		srv := startServe(b, extra...)
		idleServer = srv
		pid := srv.cmd.Process.Pid
		var warm *serveProc
		if os.Getenv("FERRY_IDLE_WARM") != "" {
			warm = startServe(b)
		}
		settle := func() { time.Sleep(4 * time.Second) }
		clients := make([]*idleClient, n)
		// One registry for all the client messengers: the counters a
		// messenger makes on its first message (by peer and message
		// type) are the messenger's, not its connection's.
		reg := metrics.NewRegistry()
		for i := range clients {
			m, err := msgr.New(msgr.Config{Logger: quietLog, Metrics: reg})
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
		if warm != nil {
			connectIdle(b, clients, warm.addr)
		}
		runtime.GC()
		settle()
		cli0, srv0 := procKB(b, os.Getpid(), "VmRSS"), procKB(b, pid, "VmRSS")
		var cliMem0, srvMem0 idleMem
		if profDir != "" {
			cliMem0, srvMem0 = clientMem(), serverMem(b, srvDebug)
			writeIdleProfiles(b, profDir, srvDebug, "0")
		}
		if v, err := strconv.Atoi(os.Getenv("FERRY_IDLE_CLIENT_GOGC")); err == nil {
			defer debug.SetGCPercent(debug.SetGCPercent(v))
		}
		start := time.Now()
		connectIdle(b, clients, srv.addr)
		setup := time.Since(start)
		settle()
		cli1, srv1 := procKB(b, os.Getpid(), "VmRSS"), procKB(b, pid, "VmRSS")
		b.ReportMetric(float64(cli1-cli0)/float64(n), "client-KiB/conn")
		b.ReportMetric(float64(srv1-srv0)/float64(n), "server-KiB/conn")
		b.ReportMetric(float64(n), "conns")
		b.ReportMetric(setup.Seconds(), "setup-s")
		if profDir != "" {
			cliMem1, srvMem1 := clientMem(), serverMem(b, srvDebug)
			per := func(a, z uint64) float64 { return (float64(z) - float64(a)) / 1024 / float64(n) }
			b.ReportMetric(per(cliMem0.heap, cliMem1.heap), "client-heap-KiB/conn")
			b.ReportMetric(per(cliMem0.stack, cliMem1.stack), "client-stack-KiB/conn")
			b.ReportMetric((float64(cliMem1.goroutines)-float64(cliMem0.goroutines))/float64(n), "client-goroutines/conn")
			b.ReportMetric(per(cliMem0.alloc, cliMem1.alloc), "client-alloc-KiB/conn")
			b.ReportMetric(float64(cliMem1.gcs-cliMem0.gcs-2), "client-GCs")
			b.ReportMetric(per(srvMem0.heap, srvMem1.heap), "server-heap-KiB/conn")
			b.ReportMetric(per(srvMem0.stack, srvMem1.stack), "server-stack-KiB/conn")
			b.ReportMetric((float64(srvMem1.goroutines)-float64(srvMem0.goroutines))/float64(n), "server-goroutines/conn")
			writeIdleProfiles(b, profDir, srvDebug, "")
		}
	}
}

// connectIdle connects each client to addr and exchanges one ping on
// it, one client after the other.
func connectIdle(b *testing.B, clients []*idleClient, addr string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for i, c := range clients {
		conn, err := c.m.Connect(addr)
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
}

// memStatsOf returns the runtime.MemStats lines ("# Name = ...") of a
// heap profile's text form.
func memStatsOf(profile string) string {
	var out strings.Builder
	for l := range strings.SplitSeq(profile, "\n") {
		if strings.HasPrefix(l, "# ") && strings.Contains(l, " = ") && !strings.HasPrefix(l, "# 0x") {
			out.WriteString(l + "\n")
		}
	}
	return out.String()
}

// idleMem is what BenchmarkIdleConnections reads of one side's Go
// runtime: bytes of heap spans and goroutine stacks in use, after a GC,
// and the goroutines.
type idleMem struct {
	heap, stack uint64
	goroutines  int
	alloc       uint64 // bytes allocated so far (client only)
	gcs         uint32 // collections so far, forced ones included (client only)
}

func clientMem() idleMem {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return idleMem{heap: ms.HeapInuse, stack: ms.StackInuse, goroutines: runtime.NumGoroutine(), alloc: ms.TotalAlloc, gcs: ms.NumGC}
}

// serverMem reads the server's figures from its heap profile's text form,
// which ends with runtime.MemStats ("# HeapInuse = N", "# Stack = INUSE /
// SYS"), and its goroutine profile ("goroutine profile: total N").
func serverMem(b *testing.B, debug string) idleMem {
	var m idleMem
	for l := range strings.SplitSeq(httpGet(b, debug+"heap?gc=1&debug=1"), "\n") {
		if v, ok := strings.CutPrefix(l, "# HeapInuse = "); ok {
			m.heap, _ = strconv.ParseUint(v, 10, 64)
		}
		if v, ok := strings.CutPrefix(l, "# Stack = "); ok {
			inuse, _, _ := strings.Cut(v, " ")
			m.stack, _ = strconv.ParseUint(inuse, 10, 64)
		}
	}
	g := httpGet(b, debug+"goroutine?debug=1")
	if _, err := fmt.Sscanf(g, "goroutine profile: total %d", &m.goroutines); err != nil {
		b.Fatalf("server goroutine profile: %v", err)
	}
	if m.heap == 0 || m.stack == 0 {
		b.Fatal("server heap profile has no HeapInuse or Stack line")
	}
	return m
}

// idleServer is the benchmark's `ferry serve`, whose stderr a failed
// request reports.
var idleServer *serveProc

func httpGet(b *testing.B, url string) string {
	resp, err := http.Get(url)
	if err != nil {
		if idleServer != nil {
			b.Logf("serve's stderr:\n%s", idleServer.stderr.String())
		}
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(bufio.NewReader(resp.Body))
	if err != nil {
		b.Fatal(err)
	}
	return string(body)
}

// writeIdleProfiles writes both sides' heap profiles and goroutine dumps
// into dir, their names ending with suffix.
func writeIdleProfiles(b *testing.B, dir, srvDebug, suffix string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name+suffix), []byte(data), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	write("server.heap", httpGet(b, srvDebug+"heap?gc=1"))
	write("server.memstats", memStatsOf(httpGet(b, srvDebug+"heap?debug=1")))
	write("server.goroutines", httpGet(b, srvDebug+"goroutine?debug=1"))
	runtime.GC()
	var heap, gor strings.Builder
	if err := pprof.Lookup("heap").WriteTo(&heap, 0); err != nil {
		b.Fatal(err)
	}
	if err := pprof.Lookup("goroutine").WriteTo(&gor, 1); err != nil {
		b.Fatal(err)
	}
	write("client.heap", heap.String())
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	write("client.memstats", fmt.Sprintf("# HeapAlloc = %d\n# HeapSys = %d\n# HeapIdle = %d\n# HeapInuse = %d\n# HeapReleased = %d\n# Stack = %d / %d\n# MSpan = %d / %d\n# OtherSys = %d\n# GCSys = %d\n# NextGC = %d\n# Sys = %d\n",
		ms.HeapAlloc, ms.HeapSys, ms.HeapIdle, ms.HeapInuse, ms.HeapReleased, ms.StackInuse, ms.StackSys, ms.MSpanInuse, ms.MSpanSys, ms.OtherSys, ms.GCSys, ms.NextGC, ms.Sys))
	write("client.goroutines", gor.String())
}
