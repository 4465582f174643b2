// Package msgrbench benchmarks the messenger (package msgr) against a
// raw-TCP request/response floor, with client and server in two processes
// on loopback.
//
// The benchmarks live in bench_test.go. The test binary re-executes itself
// with FERRY_BENCH_ROLE=server to run Serve, which hosts a ferry echo
// messenger and a raw length-prefixed TCP echo server side by side. See
// BENCHMARKS.md at the repository root for the command and the results.
package msgrbench

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/auth/cephx"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/transport"
)

// BenchCC is the TCP congestion control that FERRY_BENCH_CC names for
// every TCP socket of both processes (raw and ferry), e.g. "cubic" to
// compare without BBR's pacing where it is the system default; empty
// keeps the system's.
func BenchCC() string { return os.Getenv("FERRY_BENCH_CC") }

// ccControl sets BenchCC on a raw socket (net.Dialer / net.ListenConfig
// Control).
func ccControl(network, address string, rc syscall.RawConn) error {
	return transport.CongestionControl(BenchCC())(network, address, rc)
}

// Transports is the ferry messengers' transport registry: TCP with
// BenchCC.
func Transports() *transport.Registry {
	return transport.NewRegistry(transport.NewTCP(transport.TCPOptions{Congestion: BenchCC()}))
}

// Message types the echo messenger answers. TypeEcho goes through the
// dispatch queue and the messenger's dispatch goroutine; TypeEchoFast is
// answered inline on the connection's reader goroutine (FastDispatcher).
const (
	TypeEcho     uint16 = 0x7e01
	TypeEchoFast uint16 = 0x7e02
)

// MaxRawPayload bounds the length prefix the raw echo server accepts.
const MaxRawPayload = 64 << 20

// rawCopyMax is the payload size up to which the raw echo copies the
// length prefix and payload into one buffer for a single write; larger
// payloads go out with writev (net.Buffers).
const rawCopyMax = 16 << 10

// Serve runs the benchmark server role. It starts a ferry echo messenger
// and a raw TCP echo server on 127.0.0.1 (ephemeral ports) and writes their
// addresses to out as three lines:
//
//	ferry tcp://127.0.0.1:PORT
//	ferry-busy tcp://127.0.0.1:PORT
//	raw 127.0.0.1:PORT
//
// ferry-busy is a second echo messenger, whose sockets busy-poll for
// BusyPoll (msgr.Config.BusyPoll) when they find nothing to read.
//
// It then reads commands from in, one per line, and answers each with one
// line on out:
//
//	stats  ->  stats MALLOCS ECHOES SYSCR SYSCW
//
// where MALLOCS is runtime.MemStats.Mallocs of this process, ECHOES the
// number of requests echoed so far (ferry and raw together), and SYSCR and
// SYSCW the process's read and write system calls so far (ProcIO; 0 where
// unavailable). Serve returns
// when in reaches EOF (the client closed it or exited), after shutting the
// servers down.
//
// The ferry echo sends the received message object back as the reply (same
// tid, same segments), so the server's own code allocates nothing per
// message and the allocations counted are the messenger's.
func Serve(in io.Reader, out io.Writer, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	var echoes atomic.Uint64

	ver, err := osdVerifier()
	if err != nil {
		return err
	}
	m, err := echoMessenger(log, &echoes, ver, 0)
	if err != nil {
		return err
	}
	defer m.Shutdown()
	mb, err := echoMessenger(log, &echoes, ver, BusyPoll())
	if err != nil {
		return err
	}
	defer mb.Shutdown()

	lc := net.ListenConfig{Control: ccControl}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	raw := &rawServer{ln: ln, echoes: &echoes, conns: make(map[net.Conn]struct{})}
	wg.Add(1)
	go func() {
		defer wg.Done()
		raw.acceptLoop(&wg)
	}()
	defer func() {
		raw.close()
		wg.Wait()
	}()

	if _, err := fmt.Fprintf(out, "ferry %s\nferry-busy %s\nraw %s\n", m.ListenAddrs()[0], mb.ListenAddrs()[0], ln.Addr()); err != nil {
		return err
	}
	return serveCommands(in, out, &echoes)
}

// BusyPoll is the busy poll of the ferry-busy contenders:
// FERRY_BENCH_BUSY_POLL (a duration), default 50 µs.
func BusyPoll() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("FERRY_BENCH_BUSY_POLL")); err == nil {
		return d
	}
	return 50 * time.Microsecond
}

// echoMessenger starts an echo messenger on 127.0.0.1 that busy-polls for
// busy.
func echoMessenger(log *slog.Logger, echoes *atomic.Uint64, ver *cephx.Verifier, busy time.Duration) (*msgr.Messenger, error) {
	m, err := msgr.New(msgr.Config{
		BusyPoll: busy,
		Name:     msg.EntityName{Type: msg.EntityOSD, Num: 0},
		Logger:   log,
		// Offered; in force only with the client that sets it too
		// (ferry-fast-nocrc).
		NoDataCRC:  true,
		Transports: Transports(),
		// Auth none, or cephx with the OSD key of EnvOSDKey (the
		// secure-mode client).
		Auth: msgr.AuthConfig{ServerFor: func(msg.EntityAddr) (auth.Server, error) {
			return &noneOrCephx{cephx: ver}, nil
		}},
	})
	if err != nil {
		return nil, err
	}
	m.SetDefaultPolicy(msgr.StatelessServer())
	m.AddDispatcherTail(&echoDispatcher{n: echoes})
	if err := m.Bind("tcp://127.0.0.1:0"); err != nil {
		m.Shutdown()
		return nil, err
	}
	if err := m.Start(); err != nil {
		m.Shutdown()
		return nil, err
	}
	return m, nil
}

// serveCommands answers the client's commands on in (see Serve) until
// in ends.
func serveCommands(in io.Reader, out io.Writer, echoes *atomic.Uint64) error {
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		switch cmd := strings.TrimSpace(sc.Text()); cmd {
		case "stats":
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			r, w, _ := ProcIO()
			if _, err := fmt.Fprintf(out, "stats %d %d %d %d\n", ms.Mallocs, echoes.Load(), r, w); err != nil {
				return err
			}
		case "":
		default:
			if _, err := fmt.Fprintf(out, "error unknown command %q\n", cmd); err != nil {
				return err
			}
		}
	}
	return sc.Err()
}

// EnvOSDKey names the environment variable through which the client
// hands the server process the OSD service key (keyring form) its cephx
// tickets are sealed with; without it the server allows auth none only.
const EnvOSDKey = "FERRY_BENCH_OSD_KEY"

func osdVerifier() (*cephx.Verifier, error) {
	s := os.Getenv(EnvOSDKey)
	if s == "" {
		return nil, nil
	}
	k, err := cephx.ParseKey(s)
	if err != nil {
		return nil, err
	}
	return cephx.NewVerifier(cephx.VerifierConfig{Service: msg.EntityOSD, StaticKey: k})
}

// noneOrCephx allows auth none and, with a verifier, cephx.
type noneOrCephx struct {
	none  auth.NoneServer
	cephx *cephx.Verifier
	sess  auth.Server
}

func (s *noneOrCephx) Methods(msg.EntityType) []uint32 {
	if s.cephx == nil {
		return []uint32{auth.MethodNone}
	}
	return []uint32{auth.MethodCephx, auth.MethodNone}
}

func (s *noneOrCephx) Handle(method uint32, pt msg.EntityType, mode uint32, first bool, p []byte) (auth.Reply, error) {
	if first {
		s.sess = &s.none
		if method == auth.MethodCephx && s.cephx != nil {
			s.sess = s.cephx.Handler()
		}
	}
	return s.sess.Handle(method, pt, mode, first, p)
}

// echoDispatcher answers every TypeEcho and TypeEchoFast message with
// itself.
type echoDispatcher struct{ n *atomic.Uint64 }

func (d *echoDispatcher) echo(m *msg.Message) {
	d.n.Add(1)
	c := m.Conn
	m.Conn = nil
	if crc, ok := m.ReceivedDataCRC(); ok {
		// The same bytes go back, checked on receipt: as ferry serve's
		// echo does, spare the writer computing their CRC again.
		m.SetDataCRCAhead(crc)
	}
	_ = c.Send(m)
}

// Dispatch echoes TypeEcho messages (queued path).
func (d *echoDispatcher) Dispatch(m *msg.Message) bool {
	if m.Header.Type != TypeEcho && m.Header.Type != TypeEchoFast {
		return false
	}
	d.echo(m)
	return true
}

// CanFastDispatch takes TypeEchoFast messages.
func (d *echoDispatcher) CanFastDispatch(m *msg.Message) bool {
	return m.Header.Type == TypeEchoFast
}

// FastDispatch echoes m inline on the reader goroutine.
func (d *echoDispatcher) FastDispatch(m *msg.Message) { d.echo(m) }

// rawServer is the floor: a length-prefixed (4-byte little-endian length,
// then payload) echo, one goroutine per connection, buffered reads, one
// write per reply.
type rawServer struct {
	ln     net.Listener
	echoes *atomic.Uint64

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
}

func (s *rawServer) acceptLoop(wg *sync.WaitGroup) {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = c.Close()
			return
		}
		s.conns[c] = struct{}{}
		wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer wg.Done()
			_ = RawEcho(c, s.echoes)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			_ = c.Close()
		}()
	}
}

func (s *rawServer) close() {
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	_ = s.ln.Close()
}

// RawEcho serves the raw floor protocol on c until it fails or the peer
// closes it: it reads a 4-byte little-endian length and that many bytes,
// and writes both back, with one write for payloads up to 16 KiB and one
// writev (net.Buffers) above. Buffers are reused, so it does not allocate
// per message once it has seen the largest payload. Each echo increments
// n when n is not nil. It returns nil on a clean EOF.
func RawEcho(c net.Conn, n *atomic.Uint64) error {
	br := bufio.NewReaderSize(c, 64<<10)
	var (
		hdr  [4]byte
		buf  []byte // hdr + payload
		iov  [2][]byte
		bufs net.Buffers
	)
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		sz := binary.LittleEndian.Uint32(hdr[:])
		if sz > MaxRawPayload {
			return fmt.Errorf("msgrbench: raw payload of %d bytes exceeds %d", sz, MaxRawPayload)
		}
		if need := 4 + int(sz); cap(buf) < need {
			buf = make([]byte, need)
		}
		buf = buf[:4+sz]
		copy(buf, hdr[:])
		if _, err := io.ReadFull(br, buf[4:]); err != nil {
			return err
		}
		if n != nil {
			n.Add(1) // before the reply, so a client that has it sees the count
		}
		var err error
		if sz <= rawCopyMax {
			_, err = c.Write(buf)
		} else {
			iov = [2][]byte{hdr[:], buf[4:]}
			bufs = iov[:]
			_, err = bufs.WriteTo(c)
		}
		if err != nil {
			return err
		}
	}
}

// ProcIO returns the calling process's counts of read and write system
// calls (syscr and syscw of /proc/self/io, Linux only). Each write or
// writev is one syscw, so the count per message shows how well writes are
// coalesced. The Go runtime's own wake-ups of its network poller also
// count as writes.
func ProcIO() (syscr, syscw uint64, err error) {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		var n uint64
		if _, err := fmt.Sscan(strings.TrimSpace(v), &n); err != nil {
			continue
		}
		switch k {
		case "syscr":
			syscr = n
		case "syscw":
			syscw = n
		}
	}
	return syscr, syscw, nil
}
