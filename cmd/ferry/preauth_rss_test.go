package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/auth/cephx"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr/msgr1"
	"github.com/ferrymsg/ferry/msgr/msgr2"
)

// procKB returns a /proc/PID/status field in KiB (VmRSS, VmHWM).
func procKB(t testing.TB, pid int, field string) int64 {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", field, v, err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// Pre-auth memory budget of one connection, as msgr.Config documents it:
// the read buffer (64 KiB) and Limits.MaxPreAuth (16 KiB), plus the
// engine's transcript of the same bytes and a goroutine stack or two;
// rounded up to 160 KiB. The slack covers the runtime's own growth (GC
// target, scavenger lag) over 200 connections.
const (
	preAuthPerConnKB = 160
	preAuthSlackKB   = 24 << 10
)

// TestPreAuthMemoryRSS: a `ferry serve --auth cephx` process and 200
// concurrent raw TCP connections that never authenticate. A quarter
// declare a 200 MiB MESSAGE after HELLO and stream its body; a quarter an
// AUTH_REQUEST of 60 KiB (within the control-frame limit, beyond the
// pre-auth one) and stream it; a quarter an AUTH_REQUEST of 15 KiB, send
// all of it but its last bytes and sit; a quarter a banner declaring the
// largest payload, send half of it and sit. The server's VmRSS while they
// are there stays within base + 200 × 160 KiB + 24 MiB, its VmHWM too,
// the refused ones are closed by the server, and a cephx `ferry ping`
// is answered meanwhile.
func TestPreAuthMemoryRSS(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc: VmRSS cannot be read")
	}
	bin := fastBinary(t) // no -race: its shadow memory would swamp the figures
	key, err := cephx.GenerateKey(rand.Reader, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	kr := &cephx.Keyring{Entries: []cephx.KeyringEntry{{Name: msg.AuthName{Type: msg.EntityClient, ID: "admin"}, Key: key,
		Caps: map[string]string{"mon": "allow *"}}}}
	krPath := filepath.Join(t.TempDir(), "keyring")
	if err := os.WriteFile(krPath, kr.Marshal(), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	srv := startProc(t, "serve", exec.CommandContext(ctx, bin, "serve", "--listen", "v2:127.0.0.1:0",
		"--auth", "cephx", "--keyring", krPath))
	addr := srv.listenAddr(t)
	hostport, _, _ := strings.Cut(strings.TrimPrefix(addr, "v2:"), "/")
	pid := srv.cmd.Process.Pid

	ping := func() {
		t.Helper()
		r := runFerry(t, 15*time.Second, "ping", "--keyring", krPath, "--name", "client.admin", "--count", "3", "--timeout", "10s", addr)
		if r.code != 0 {
			t.Fatalf("ping exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
	}
	ping() // warm: the cephx paths are paged in before the base is read
	base := procKB(t, pid, "VmRSS")

	var hello []byte
	hello = msgr2.AppendBanner(hello, msgr2.FeatureRevision1, 0)
	hello = msgr2.AppendFrame(hello, msgr2.TagHello, true, (&msgr2.Hello{EntityType: msg.EntityClient}).Append(nil))
	bigMsg := msgr2.Preamble{Tag: msgr2.TagMessage, NumSegments: 4, Segments: [4]msgr2.SegmentDesc{
		{Len: msgr2.Header2Len, Align: 8}, {}, {}, {Len: 200 << 20, Align: 4096}}}
	bigAuth := msgr2.Preamble{Tag: msgr2.TagAuthRequest, NumSegments: 1, Segments: [4]msgr2.SegmentDesc{{Len: 60 << 10, Align: 8}}}
	heldAuth := msgr2.Preamble{Tag: msgr2.TagAuthRequest, NumSegments: 1, Segments: [4]msgr2.SegmentDesc{{Len: 15 << 10, Align: 8}}}
	bigBanner := []byte(msgr2.BannerPrefix + "\x00\x00")
	bigBanner[len(bigBanner)-2] = byte(msgr2.MaxBannerPayload & 0xff)
	bigBanner[len(bigBanner)-1] = byte(msgr2.MaxBannerPayload >> 8)

	kinds := []struct {
		name   string
		first  []byte
		stream bool // keep sending junk until the server closes
		refuse bool // the server must close it from the preamble
	}{
		{"200 MiB MESSAGE", append(append([]byte(nil), hello...), bigMsg.Append(nil)...), true, true},
		{"60 KiB AUTH_REQUEST", append(append([]byte(nil), hello...), bigAuth.Append(nil)...), true, true},
		{"15 KiB AUTH_REQUEST held", append(append(append([]byte(nil), hello...), heldAuth.Append(nil)...), make([]byte, 15<<10-64)...), false, false},
		{"4 KiB banner held", append(append([]byte(nil), bigBanner...), make([]byte, msgr2.MaxBannerPayload/2)...), false, false},
	}
	const n = 200
	junk := make([]byte, 64<<10)
	var (
		wg      sync.WaitGroup // the refused ones
		sent    sync.WaitGroup
		held    atomic.Int64 // held connections the server has not closed
		mu      sync.Mutex
		conns   []net.Conn
		unclose []string
	)
	deadline := time.Now().Add(15 * time.Second)
	for i := 0; i < n; i++ {
		k := kinds[i%len(kinds)]
		if k.refuse {
			wg.Add(1)
		}
		sent.Add(1)
		go func() {
			if k.refuse {
				defer wg.Done()
			}
			c, err := net.DialTimeout("tcp", hostport, 5*time.Second)
			if err != nil {
				sent.Done()
				t.Errorf("dial: %v", err)
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			_ = c.SetDeadline(deadline)
			_, err = c.Write(k.first)
			sent.Done()
			if err != nil {
				if !k.refuse {
					t.Errorf("%s: write: %v", k.name, err)
				}
				return
			}
			if k.stream {
				go func() {
					for j := 0; j < 64; j++ { // at most 4 MiB of "body"
						if _, err := c.Write(junk); err != nil {
							return
						}
					}
				}()
			}
			if !k.refuse {
				held.Add(1)
				_, _ = io.Copy(io.Discard, c) // until the server or the test closes it
				held.Add(-1)
			} else {
				_, err := io.Copy(io.Discard, c)
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					mu.Lock()
					unclose = append(unclose, k.name)
					mu.Unlock()
				}
			}
		}()
	}
	sent.Wait()
	time.Sleep(500 * time.Millisecond) // let the server read what was sent
	peak := procKB(t, pid, "VmRSS")
	heldAtPeak := held.Load()
	ping() // an honest cephx client is served while they sit there
	if r := procKB(t, pid, "VmRSS"); r > peak {
		peak = r
	}
	wg.Wait() // the refused ones are closed by then
	if r := procKB(t, pid, "VmRSS"); r > peak {
		peak = r
	}
	hwm := procKB(t, pid, "VmHWM")
	heldAfter := held.Load()
	mu.Lock()
	for _, c := range conns {
		c.Close()
	}
	mu.Unlock()
	// The measurement means something only if the held connections were
	// there: the server keeps a handshake up to its timeout (10 s).
	if heldAtPeak < n/2-n/20 || heldAfter < n/2-n/20 {
		t.Errorf("only %d (at the first sample) and %d (at the last) of the %d held connections were open", heldAtPeak, heldAfter, n/2)
	}
	if len(unclose) > 0 {
		t.Errorf("%d connections that should have been refused from their preamble were not closed by the server: %v", len(unclose), unclose[:min(4, len(unclose))])
	}
	budget := base + n*preAuthPerConnKB + preAuthSlackKB
	t.Logf("VmRSS base %d KiB, peak with %d pre-auth connections (%d held open) %d KiB (+%d KiB, %d KiB per connection), VmHWM %d KiB; budget %d KiB",
		base, n, heldAfter, peak, peak-base, (peak-base)/n, hwm, budget)
	if peak > budget {
		t.Errorf("VmRSS %d KiB with %d unauthenticated connections exceeds the budget %d KiB", peak, n, budget)
	}
	if hwm > budget {
		t.Errorf("VmHWM %d KiB exceeds the budget %d KiB", hwm, budget)
	}
}

// v1Ready runs a msgr1 client handshake (no authorizer, as a mon's
// clients do before MAuth) on c and returns the engine once READY.
func v1Ready(c net.Conn, nonce uint32) (*msgr1.Engine, error) {
	e := msgr1.NewEngine(msgr1.Config{Role: msgr1.Client, MyName: msg.EntityName{Type: msg.EntityClient, Num: -1},
		Nonce: nonce, PeerType: msg.EntityMon, Supported: msg.FeaturesAll, Lossy: true, GlobalSeq: 1})
	e.Start()
	br := bufio.NewReader(c)
	for !e.Ready() {
		if out := e.Output(); len(out) > 0 {
			if _, err := c.Write(out); err != nil {
				return nil, err
			}
		}
		n, _ := e.Need()
		if n == 0 {
			return nil, fmt.Errorf("msgr1 handshake stalled: %v", e.Err())
		}
		buf := make([]byte, n)
		if _, err := io.ReadFull(br, buf); err != nil {
			return nil, err
		}
		if _, err := e.Feed(buf); err != nil {
			return nil, err
		}
	}
	if out := e.Output(); len(out) > 0 {
		if _, err := c.Write(out); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// TestPreAuthMemoryRSSV1 is TestPreAuthMemoryRSS against a msgr1
// listener (`ferry serve --listen v1:… --auth cephx`, a mon: its clients
// connect without an authorizer and authenticate with MAuth after
// READY). Of 200 raw connections, half complete the connect handshake
// and then, before any MAuth, declare a 200 MiB message (front) and
// stream its body; a quarter send half the banner and sit; a quarter
// send the banner and a connect declaring a 4 KiB authorizer, half of
// it, and sit. Before the MAuth exchange only small MAuth messages may
// be accepted (issue 14, item 5): VmRSS must stay within the same budget
// as over msgr2, and a cephx `ferry ping v1:` is answered meanwhile.
func TestPreAuthMemoryRSSV1(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc: VmRSS cannot be read")
	}
	bin := fastBinary(t)
	key, err := cephx.GenerateKey(rand.Reader, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	kr := &cephx.Keyring{Entries: []cephx.KeyringEntry{{Name: msg.AuthName{Type: msg.EntityClient, ID: "admin"}, Key: key,
		Caps: map[string]string{"mon": "allow *"}}}}
	krPath := filepath.Join(t.TempDir(), "keyring")
	if err := os.WriteFile(krPath, kr.Marshal(), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	srv := startProc(t, "serve", exec.CommandContext(ctx, bin, "serve", "--listen", "v1:127.0.0.1:0",
		"--auth", "cephx", "--keyring", krPath))
	addr := srv.listenAddr(t)
	hostport, _, _ := strings.Cut(strings.TrimPrefix(addr, "v1:"), "/")
	pid := srv.cmd.Process.Pid
	// Over msgr1 a mon's client pings before any MAuth login (as `ceph
	// ping` does): small messages of an unauthenticated peer are served.
	ping := func() {
		t.Helper()
		r := runFerry(t, 15*time.Second, "ping", "--count", "3", "--timeout", "10s", addr)
		if r.code != 0 {
			t.Fatalf("ping exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
	}
	ping()
	base := procKB(t, pid, "VmRSS")

	halfBanner := []byte(msgr1.Banner)[:len(msgr1.Banner)/2]
	var me msg.EntityAddr
	me.Type = msg.AddrLegacy
	connect := msgr1.Connect{Features: msg.FeaturesAll, HostType: uint32(msg.EntityClient), GlobalSeq: 1,
		ProtocolVersion: msgr1.ProtoVersion(msg.EntityClient, msg.EntityMon, true), AuthorizerProtocol: 2, AuthorizerLen: 4096}
	heldAuthz := connect.Append(msgr1.AppendClientBanner(nil, me))
	heldAuthz = append(heldAuthz, make([]byte, 2048)...)

	const n = 200
	junk := make([]byte, 64<<10)
	var (
		sent    sync.WaitGroup
		mu      sync.Mutex
		conns   []net.Conn
		readied atomic.Int64
		refused sync.WaitGroup // the ones past READY: closed by the server
		unclose atomic.Int64
		held    atomic.Int64
	)
	deadline := time.Now().Add(15 * time.Second)
	for i := 0; i < n; i++ {
		sent.Add(1)
		if i%4 < 2 {
			refused.Add(1)
		}
		go func() {
			if i%4 < 2 {
				defer refused.Done()
			}
			c, err := net.DialTimeout("tcp", hostport, 5*time.Second)
			if err != nil {
				sent.Done()
				t.Errorf("dial: %v", err)
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			_ = c.SetDeadline(deadline)
			switch i % 4 {
			case 0, 1:
				_, err := v1Ready(c, uint32(1000+i))
				if err != nil {
					sent.Done()
					t.Errorf("msgr1 handshake: %v", err)
					return
				}
				readied.Add(1)
				h := msgr1.Header{Seq: 1, Type: 17 /* CEPH_MSG_AUTH */, FrontLen: 200 << 20, Src: msg.EntityName{Type: msg.EntityClient, Num: -1}}
				b, _ := h.Append([]byte{byte(msgr1.TagMsg)})
				_, err = c.Write(b)
				sent.Done()
				if err != nil {
					return // already refused
				}
				go func() {
					for j := 0; j < 64; j++ { // at most 4 MiB of front
						if _, err := c.Write(junk); err != nil {
							return
						}
					}
				}()
				if _, err := io.Copy(io.Discard, c); err != nil {
					if ne, ok := err.(net.Error); ok && ne.Timeout() {
						unclose.Add(1)
					}
				}
				return
			case 2:
				_, _ = c.Write(halfBanner)
				sent.Done()
			case 3:
				_, _ = c.Write(heldAuthz)
				sent.Done()
			}
			held.Add(1)
			_, _ = io.Copy(io.Discard, c)
			held.Add(-1)
		}()
	}
	sent.Wait()
	time.Sleep(500 * time.Millisecond)
	peak := procKB(t, pid, "VmRSS")
	ping()
	if r := procKB(t, pid, "VmRSS"); r > peak {
		peak = r
	}
	refused.Wait()
	if r := procKB(t, pid, "VmRSS"); r > peak {
		peak = r
	}
	hwm := procKB(t, pid, "VmHWM")
	heldAfter := held.Load()
	mu.Lock()
	for _, c := range conns {
		c.Close()
	}
	mu.Unlock()
	if u := unclose.Load(); u > 0 {
		t.Errorf("%d msgr1 connections that declared a 200 MiB message before authenticating were not closed by the server", u)
	}
	if heldAfter < n/2-n/20 {
		t.Errorf("only %d of the %d held msgr1 connections were open when measured", heldAfter, n/2)
	}
	budget := base + n*preAuthPerConnKB + preAuthSlackKB
	t.Logf("VmRSS base %d KiB, peak with %d pre-auth msgr1 connections (%d past READY, %d held open) %d KiB (+%d KiB, %d KiB per connection), VmHWM %d KiB; budget %d KiB",
		base, n, readied.Load(), heldAfter, peak, peak-base, (peak-base)/n, hwm, budget)
	if peak > budget {
		t.Errorf("VmRSS %d KiB with %d unauthenticated msgr1 connections exceeds the budget %d KiB", peak, n, budget)
	}
	if hwm > budget {
		t.Errorf("VmHWM %d KiB exceeds the budget %d KiB", hwm, budget)
	}
}
