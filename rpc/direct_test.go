//go:build linux

package rpc_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/rpc"
	"github.com/ferrymsg/ferry/transport"
	"github.com/ferrymsg/ferry/transport/shm"
)

// Tests of the direct bulk path (process_vm_readv/writev between the
// processes on the two ends of a unix or shm connection). The in-process
// tests check the data, the protocol and the fallback; the two-process
// ones re-execute the test binary as the holder of the remote buffers
// (directChild), which is the real cross-process path.

// envDirectChild, set to an address, makes the test binary serve the
// bulk test protocol there as the child of the two-process tests.
const envDirectChild = "FERRY_RPC_DIRECT_CHILD"

func init() {
	// Before TestMain: the child is not a test run.
	if addr := os.Getenv(envDirectChild); addr != "" {
		os.Exit(directChild(addr))
	}
}

// directTransports resolves tcp, unix and shm addresses.
func directTransports() *transport.Registry {
	return transport.NewRegistry(transport.NewTCP(transport.TCPOptions{}), transport.NewUnix(), shm.New())
}

// directAddr returns a socket address of scheme in a fresh short
// directory (Unix socket paths are limited to 108 bytes).
func directAddr(t testing.TB, scheme string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ferry-direct")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return scheme + "://" + filepath.Join(dir, "s.sock")
}

// newDirectPair is newBulkPair over a same-host transport.
func newDirectPair(t testing.TB, scheme string, o rpc.Options) *bulkPair {
	t.Helper()
	o.Transports = directTransports()
	return newBulkPairOn(t, directAddr(t, scheme), o)
}

var directSchemes = []string{"unix", "shm"}

// directSizes are the lengths the data tests move (16 MiB becomes
// 4 MiB + 5 under the race detector, which makes filling it slow).
var directSizes = []int{1, 4095, 1<<20 + 3, bigSize(16<<20, 4<<20+5)}

func bigSize(n, race int) int {
	if raceBuild {
		return race
	}
	return n
}

// waitLeases waits until no peer holds a direct range (their
// BulkDirectDone messages arrived).
func waitLeases(t testing.TB) {
	t.Helper()
	waitFor(t, "direct leases released", func() bool { return rpc.DirectLeases() == 0 })
}

func TestDirectBulk(t *testing.T) {
	for _, scheme := range directSchemes {
		t.Run(scheme, func(t *testing.T) {
			checkGoroutines(t)
			defer rpc.DirectAnySize()()
			p := newDirectPair(t, scheme, rpc.Options{})
			p.serveBulkTest(t)
			rng := rand.New(rand.NewPCG(11, 12))
			for _, n := range directSizes {
				for _, op := range []rpc.BulkOp{rpc.BulkGet, rpc.BulkPut} {
					before := p.cctx.BulkStats().Direct
					checkTransfer(t, p, rng, op, n, 1)
					if got := p.cctx.BulkStats().Direct - before; got != 1 {
						t.Fatalf("%v of %d bytes: %d transfers by the direct path, want 1", op, n, got)
					}
				}
			}
			st := p.cctx.BulkStats()
			if st.Active != 0 || st.InFlight != 0 || st.Failed != 0 || st.Completed != st.Direct {
				t.Fatalf("stats after the transfers: %+v", st)
			}
			waitLeases(t)
		})
	}
}

// Buffers of thousands of slices take several system calls (IOV_MAX
// slices per side each), cut on either side.
func TestDirectManySegments(t *testing.T) {
	p := newDirectPair(t, "unix", rpc.Options{})
	rng := rand.New(rand.NewPCG(19, 20))
	const n = 3<<20 + 11
	// Warm the connection: a transfer on one still being set up goes by
	// messages.
	warm := register(t, p.srv, [][]byte{make([]byte, 1)}, rpc.BulkRW)
	if err := p.cctx.TransferWait(context.Background(), rpc.BulkDesc{Op: rpc.BulkGet, Remote: warm.Handle(),
		Local: register(t, p.cli, [][]byte{make([]byte, 1)}, rpc.BulkRW), Len: 1, Peer: p.peer}); err != nil {
		t.Fatal(err)
	}
	for _, op := range []rpc.BulkOp{rpc.BulkGet, rpc.BulkPut} {
		for _, pieces := range [][2]int{{2500, 3}, {3, 3000}, {2200, 2900}} {
			rsegs, rall := manySegs(rng, n, pieces[0])
			lsegs, lall := manySegs(rng, n, pieces[1])
			want := bytes.Clone(rall)
			if op == rpc.BulkPut {
				want = bytes.Clone(lall)
			}
			rb := register(t, p.srv, rsegs, rpc.BulkRW)
			lb := register(t, p.cli, lsegs, rpc.BulkRW)
			calls, direct := rpc.DirectCalls(), p.cctx.BulkStats().Direct
			if err := p.cctx.TransferWait(context.Background(), rpc.BulkDesc{Op: op, Remote: rb.Handle(), Local: lb, Len: n, Peer: p.peer}); err != nil {
				t.Fatal(err)
			}
			if got := rpc.DirectCalls() - calls; got < 3 || p.cctx.BulkStats().Direct != direct+1 {
				t.Fatalf("%v, %v pieces: %d system calls, direct %d", op, pieces, got, p.cctx.BulkStats().Direct-direct)
			}
			// Only the kernel wrote the buffers since they were filled.
			if !bytes.Equal(lall, want) || !bytes.Equal(rall, want) {
				t.Fatalf("%v, %v pieces: data differs", op, pieces)
			}
		}
	}
	waitLeases(t)
}

// manySegs cuts n random bytes into k non-empty slices of random sizes.
func manySegs(rng *rand.Rand, n, k int) ([][]byte, []byte) {
	all := make([]byte, n)
	for i := range all {
		all[i] = byte(rng.Uint32())
	}
	seen := map[int]bool{}
	var cuts []int
	for len(cuts) < k-1 {
		if c := 1 + rng.IntN(n-1); !seen[c] {
			seen[c] = true
			cuts = append(cuts, c)
		}
	}
	slices.Sort(cuts)
	var segs [][]byte
	last := 0
	for _, c := range cuts {
		segs = append(segs, all[last:c:c])
		last = c
	}
	return append(segs, all[last:]), all
}

// Without the test hook only transfers above the eager limit go direct,
// and TCP never does.
func TestDirectThreshold(t *testing.T) {
	for _, scheme := range []string{"unix", "tcp"} {
		t.Run(scheme, func(t *testing.T) {
			var p *bulkPair
			if scheme == "tcp" {
				p = newBulkPair(t, rpc.Options{})
			} else {
				p = newDirectPair(t, scheme, rpc.Options{})
			}
			p.serveBulkTest(t)
			rng := rand.New(rand.NewPCG(13, 14))
			for _, n := range []int{rpc.DefaultEagerLimit, rpc.DefaultEagerLimit + 1, 1 << 20} {
				before := p.cctx.BulkStats().Direct
				checkTransfer(t, p, rng, rpc.BulkGet, n, 1)
				want := uint64(0)
				if scheme != "tcp" && n > rpc.DefaultEagerLimit {
					want = 1
				}
				if got := p.cctx.BulkStats().Direct - before; got != want {
					t.Fatalf("GET of %d bytes: %d direct transfers, want %d", n, got, want)
				}
			}
		})
	}
}

// When the kernel refuses (EPERM, as under Yama's ptrace_scope or
// between users), the transfer runs through messages, and the
// connection does not try again.
func TestDirectFallback(t *testing.T) {
	for _, scheme := range directSchemes {
		t.Run(scheme, func(t *testing.T) {
			defer rpc.DirectAnySize()()
			defer rpc.DirectFail(func() error { return syscall.EPERM })()
			p := newDirectPair(t, scheme, rpc.Options{})
			p.serveBulkTest(t)
			rng := rand.New(rand.NewPCG(15, 16))
			calls := rpc.DirectCalls()
			checkTransfer(t, p, rng, rpc.BulkGet, 1<<20+3, 1)
			if got := rpc.DirectCalls() - calls; got != 1 {
				t.Fatalf("%d direct system calls for the first transfer, want 1 (refused)", got)
			}
			calls = rpc.DirectCalls()
			for _, n := range directSizes {
				for _, op := range []rpc.BulkOp{rpc.BulkGet, rpc.BulkPut} {
					checkTransfer(t, p, rng, op, n, 1)
				}
			}
			// Only the server's own first pull (the rendezvous PUT, on
			// its end of the connection) may still have tried.
			if got := rpc.DirectCalls() - calls; got > 1 {
				t.Fatalf("%d direct system calls after the connection fell back, want at most 1 (the server's)", got)
			}
			if c, s := p.cctx.BulkStats(), p.sctx.BulkStats(); c.Direct != 0 || s.Direct != 0 || c.Failed != 0 {
				t.Fatalf("stats: client %+v, server %+v", c, s)
			}
			waitLeases(t)
		})
	}
}

// The holder checks a direct request as it checks a GET or a PUT.
func TestDirectRefusals(t *testing.T) {
	defer rpc.DirectAnySize()()
	p := newDirectPair(t, "unix", rpc.Options{})
	ctx := context.Background()
	ro := register(t, p.srv, [][]byte{make([]byte, 1<<20)}, rpc.BulkRO)
	wo := register(t, p.srv, [][]byte{make([]byte, 1<<20)}, rpc.BulkWO)
	local := register(t, p.cli, [][]byte{make([]byte, 2<<20)}, rpc.BulkRW)
	forge := func(h rpc.BulkHandle) rpc.BulkHandle {
		h.Perm = rpc.BulkRW
		h.Len = 2 << 20
		return h
	}
	gone := register(t, p.srv, [][]byte{make([]byte, 4096)}, rpc.BulkRW)
	goneH := gone.Handle()
	gone.Free()
	for _, tc := range []struct {
		name string
		d    rpc.BulkDesc
		want error
	}{
		{"PUT into read-only", rpc.BulkDesc{Op: rpc.BulkPut, Remote: forge(ro.Handle()), Len: 100 << 10}, rpc.ErrNoPerm},
		{"GET from write-only", rpc.BulkDesc{Op: rpc.BulkGet, Remote: forge(wo.Handle()), Len: 100 << 10}, rpc.ErrNoPerm},
		{"GET past the end", rpc.BulkDesc{Op: rpc.BulkGet, Remote: forge(ro.Handle()), RemoteOff: 1 << 20, Len: 1}, rpc.ErrInvalid},
		{"PUT past the end", rpc.BulkDesc{Op: rpc.BulkPut, Remote: forge(wo.Handle()), RemoteOff: 1<<20 - 10, Len: 11}, rpc.ErrInvalid},
		{"GET from a freed handle", rpc.BulkDesc{Op: rpc.BulkGet, Remote: goneH, Len: 4096}, rpc.ErrNotFound},
	} {
		d := tc.d
		d.Local, d.Peer = local, p.peer
		err := p.cctx.TransferWait(ctx, d)
		var e *rpc.Error
		if !errors.Is(err, tc.want) || !errors.As(err, &e) || !e.Remote {
			t.Errorf("%s: got %v, want a remote %v", tc.name, err, tc.want)
		}
	}
	if st := p.cctx.BulkStats(); st.Direct != 0 || st.Active != 0 {
		t.Fatalf("stats: %+v", st)
	}
	// The connection still goes direct.
	if err := p.cctx.TransferWait(ctx, rpc.BulkDesc{Op: rpc.BulkGet, Remote: ro.Handle(), Local: local, Len: 1 << 20, Peer: p.peer}); err != nil {
		t.Fatal(err)
	}
	if st := p.cctx.BulkStats(); st.Direct != 1 {
		t.Fatalf("stats after a good GET: %+v", st)
	}
	waitLeases(t)
}

// Abort during a system call: the transfer completes (canceled) only
// when the call has returned, and no later call writes into the buffer.
// holdDirectCalls makes each direct system call wait, until release is
// closed, before it runs; entered receives once a call has started. The
// hook goes at the end of the test.
func holdDirectCalls(t *testing.T) (entered chan struct{}, release chan struct{}) {
	entered, release = make(chan struct{}, 1), make(chan struct{})
	t.Cleanup(rpc.DirectFail(func() error {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-release
		return nil
	}))
	return entered, release
}

func TestDirectAbortWaitsForCopy(t *testing.T) {
	const n = 16 << 20
	p := newDirectPair(t, "shm", rpc.Options{})
	src := bytes.Repeat([]byte{0xA5}, n)
	r := register(t, p.srv, [][]byte{src}, rpc.BulkRO)
	dst := make([]byte, n)
	l := register(t, p.cli, [][]byte{dst}, rpc.BulkRW)
	// Connect first: a transfer on a connection still being set up
	// goes by messages.
	if err := p.cctx.TransferWait(context.Background(), rpc.BulkDesc{Op: rpc.BulkGet, Remote: r.Handle(), Local: l, Len: 1, Peer: p.peer}); err != nil {
		t.Fatal(err)
	}
	dst[0] = 0
	entered, release := holdDirectCalls(t)
	calls := rpc.DirectCalls()
	done := make(chan error, 1)
	x, err := p.cctx.Transfer(rpc.BulkDesc{Op: rpc.BulkGet, Remote: r.Handle(), Local: l, Len: n, Peer: p.peer},
		func(c rpc.BulkCompletion) { done <- c.Err })
	if err != nil {
		t.Fatal(err)
	}
	recv(t, entered, "the first system call")
	if !x.Abort() {
		t.Fatal("Abort of a running transfer returned false")
	}
	select {
	case <-x.Done():
		t.Fatal("the aborted transfer completed while its system call was running")
	default:
	}
	close(release)
	if err := recv(t, done, "completion"); !errors.Is(err, rpc.ErrCanceled) {
		t.Fatalf("aborted transfer: %v", err)
	}
	if got := rpc.DirectCalls() - calls; got != 1 {
		t.Fatalf("%d system calls, want 1 (none after the abort)", got)
	}
	// The one call moved its share; nothing after it was written.
	moved := bytes.IndexByte(dst, 0)
	if moved <= 0 || moved == n || bytes.IndexByte(dst[moved:], 0xA5) >= 0 {
		t.Fatalf("after the abort %d bytes landed, then more", moved)
	}
	waitLeases(t)
}

// ---- two processes ----

// ptraceScope returns Yama's ptrace_scope, or "" without Yama.
func ptraceScope() string {
	b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Opcodes of the child's extra protocol.
const directTestBase = 0x44

var (
	opDirectCRC   = rpc.MakeOpcode(directTestBase, 1, 0) // the CRC of the input (pulled when large)
	opDirectStats = rpc.MakeOpcode(directTestBase, 1, 1) // the child's context's direct transfers
)

// directChild serves, at addr, the bulk test protocol of serveBulkTest
// and opDirectCRC and opDirectStats, until its stdin closes.
func directChild(addr string) int {
	in, err := rpc.New(rpc.Options{Listen: addr, Logger: quietLogger(), Transports: directTransports()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer in.Close()
	ctx, err := in.NewContext(rpc.ContextOptions{Auto: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	err = in.Register(bulkTestProtocol(in))
	if err == nil {
		err = in.Register(rpc.Protocol{Name: "directtest", Base: directTestBase, Version: 1, RPCs: []rpc.RPC{
			{Flags: rpc.Inline, Handler: func(r *rpc.Incoming) error {
				var b rpc.Bytes
				if err := r.Decode(&b); err != nil {
					return err
				}
				out := rpc.Bytes(fmt.Appendf(nil, "%d", crc32.ChecksumIEEE(b)))
				return r.Reply(&out)
			}},
			{Flags: rpc.Inline, Handler: func(r *rpc.Incoming) error {
				out := rpc.Bytes(fmt.Appendf(nil, "%d", ctx.BulkStats().Direct))
				return r.Reply(&out)
			}},
		}})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// childProc is a running directChild.
type childProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	exited chan error
	stderr *bytes.Buffer
}

// startChild starts directChild serving at addr and waits until it
// listens. The cleanup closes its stdin and waits for it to exit.
func startChild(t *testing.T, addr string) *childProc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), envDirectChild+"="+addr)
	c := &childProc{cmd: cmd, exited: make(chan error, 1), stderr: &bytes.Buffer{}}
	cmd.Stderr = c.stderr
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("child said %q", line)
		}
		ready <- err
		_, _ = io.Copy(io.Discard, stdout)
		c.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		c.stdin.Close()
		select {
		case <-c.exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-c.exited
			t.Error("child did not exit")
		}
	})
	select {
	case err := <-ready:
		if err != nil {
			t.Fatalf("starting the child: %v\n%s", err, c.stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the child did not start listening")
	}
	return c
}

// childPair is a client in this process of the child at addr.
func childPair(t *testing.T, addr string) *bulkPair {
	t.Helper()
	cli, err := rpc.New(rpc.Options{Logger: quietLogger(), Transports: directTransports()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	if err := cli.Group().Add(0, addr); err != nil {
		t.Fatal(err)
	}
	return &bulkPair{cli: cli, cctx: newCtx(t, cli, rpc.ContextOptions{Auto: true}), peer: &rpc.Endpoint{Rank: 0, Tag: 0}}
}

// callText calls op with in and returns the reply's text.
func callText(t *testing.T, p *bulkPair, op rpc.Opcode, in []byte) string {
	t.Helper()
	ib, out := rpc.Bytes(in), rpc.Bytes(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.cctx.Call(ctx, *p.peer, op, &ib, &out); err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// The real cross-process path: this process GETs from and PUTs into the
// child's buffers, and the child pulls this process's large RPC input.
func TestDirectTwoProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	scope := ptraceScope()
	for _, scheme := range directSchemes {
		t.Run(scheme, func(t *testing.T) {
			defer rpc.DirectAnySize()()
			addr := directAddr(t, scheme)
			startChild(t, addr)
			p := childPair(t, addr)
			rng := rand.New(rand.NewPCG(17, 18))
			direct := 0
			for _, n := range directSizes {
				for _, op := range []rpc.BulkOp{rpc.BulkGet, rpc.BulkPut} {
					before := p.cctx.BulkStats().Direct
					checkTransfer(t, p, rng, op, n, 1)
					direct += int(p.cctx.BulkStats().Direct - before)
				}
			}
			if direct == 0 && scope != "" && scope != "0" {
				t.Skipf("the kernel refused process_vm_readv/writev for the child (yama ptrace_scope=%s): "+
					"the transfers fell back to messages and their data was checked", scope)
			}
			if want := 2 * len(directSizes); direct != want {
				t.Fatalf("%d of %d transfers by the direct path", direct, want)
			}
			// Roles swapped: the child pulls an overflowing input from
			// this process's memory.
			in := make([]byte, 1<<20+3)
			for i := range in {
				in[i] = byte(rng.Uint32())
			}
			if got, want := callText(t, p, opDirectCRC, in), fmt.Sprint(crc32.ChecksumIEEE(in)); got != want {
				t.Fatalf("the child's CRC of a pulled input: %s, want %s", got, want)
			}
			if got := callText(t, p, opDirectStats, nil); got == "0" {
				t.Fatal("the child pulled the input without the direct path")
			}
			waitLeases(t)
		})
	}
}

// shmMaps counts this process's mappings of shm rings.
func shmMaps(t testing.TB) int {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(b, []byte("memfd:ferry-shm"))
}

// eventFDs counts this process's open eventfds.
func eventFDs(t testing.TB) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && l == "anon_inode:[eventfd]" {
			n++
		}
	}
	return n
}

// devShm lists /dev/shm.
func devShm() string {
	ents, _ := os.ReadDir("/dev/shm")
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return strings.Join(names, " ")
}

// kill -9 of the holder while this process reads its memory (or, with
// the direct path refused, pulls it by messages): the transfer fails as
// a connection fault, nothing hangs, and the shared memory is gone.
func TestDirectPeerKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	n := bigSize(32<<20, 8<<20)
	for _, scheme := range directSchemes {
		t.Run(scheme+"/holder", func(t *testing.T) { killInitiator(t, scheme, n) })
		for _, mode := range []string{"direct", "messages"} {
			t.Run(scheme+"/"+mode, func(t *testing.T) {
				maps, efds, shmBefore := shmMaps(t), eventFDs(t), devShm()
				if mode == "messages" {
					defer rpc.DirectFail(func() error { return syscall.EPERM })()
				}
				addr := directAddr(t, scheme)
				child := startChild(t, addr)
				p := childPair(t, addr)
				h, _ := p.remote(t, 1, n, 3, rpc.BulkRO)
				local := register(t, p.cli, [][]byte{make([]byte, n)}, rpc.BulkRW)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				first, failed := make(chan struct{}), make(chan error, 1)
				go func() {
					for i := 0; ; i++ {
						err := p.cctx.TransferWait(ctx, rpc.BulkDesc{Op: rpc.BulkGet, Remote: h, Local: local, Len: int64(n), Peer: p.peer})
						if err != nil {
							failed <- fmt.Errorf("transfer %d: %w", i, err)
							return
						}
						if i == 0 {
							close(first)
						}
					}
				}()
				select {
				case <-first:
				case err := <-failed:
					t.Fatal(err)
				}
				waitFor(t, "a transfer in progress", func() bool { return p.cctx.BulkStats().Active == 1 })
				if err := child.cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				err := recv(t, failed, "the failed transfer")
				if !errors.Is(err, rpc.ErrUnreachable) || errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("transfer from a killed peer: %v", err)
				}
				t.Logf("after kill -9: %v", err)
				if st := p.cctx.BulkStats(); st.Active != 0 || st.InFlight != 0 {
					t.Fatalf("stats: %+v", st)
				}
				if mode == "direct" && p.cctx.BulkStats().Direct == 0 {
					t.Fatal("no transfer took the direct path")
				}
				// This side unmapped the rings and closed the eventfds.
				waitFor(t, "the shm mapping released", func() bool { return shmMaps(t) <= maps && eventFDs(t) <= efds })
				if got := devShm(); got != shmBefore {
					t.Fatalf("/dev/shm changed: %q, was %q", got, shmBefore)
				}
			})
		}
	}
}

// killInitiator kills the child while it reads this process's memory (it
// pulls an overflowing RPC input): the call fails, and the child's lease
// on the range goes with the connection.
func killInitiator(t *testing.T, scheme string, n int) {
	maps, efds := shmMaps(t), eventFDs(t)
	addr := directAddr(t, scheme)
	child := startChild(t, addr)
	p := childPair(t, addr)
	callText(t, p, opDirectStats, nil) // connected
	in := rpc.Bytes(make([]byte, n))
	for try := 0; ; try++ {
		if try == 20 {
			t.Fatal("never saw the child holding a range of this process")
		}
		done := make(chan error, 1)
		go func() {
			var out rpc.Bytes
			done <- p.cctx.Call(context.Background(), *p.peer, opDirectCRC, &in, &out)
		}()
		deadline := time.Now().Add(10 * time.Second)
		for rpc.DirectLeases() == 0 && len(done) == 0 && time.Now().Before(deadline) {
			runtime.Gosched() // polling for a window of a few milliseconds, bounded by the deadline
		}
		if len(done) != 0 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			continue // the pull finished first: again
		}
		if err := child.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		err := recv(t, done, "the call's failure")
		if !errors.Is(err, rpc.ErrUnreachable) {
			t.Fatalf("call to a peer killed while it pulled the input: %v", err)
		}
		t.Logf("after kill -9 (try %d): %v", try, err)
		break
	}
	waitFor(t, "the dead peer's leases dropped", func() bool { return rpc.DirectLeases() == 0 })
	waitFor(t, "the shm mapping released", func() bool { return shmMaps(t) <= maps && eventFDs(t) <= efds })
}
