package msgr_test

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/transport"
)

// pollCounts returns m's busy-poll hits and sleeps.
func pollCounts(m *msgr.Messenger) (hits, sleeps float64) {
	sn := m.Metrics().Snapshot()
	return sn.Total("ferry_msgr_busy_poll_hits"), sn.Total("ferry_msgr_busy_poll_sleeps")
}

// echoRounds sends n messages to srv one at a time over a new connection
// of cli, each after the reply to the one before, and checks the echoes.
func echoRounds(t *testing.T, cli *msgr.Messenger, col *collector, srv *msgr.Messenger, n int) {
	t.Helper()
	conn, err := cli.Connect(srv.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		m := msg.New(testType)
		m.Header.Tid = uint64(i + 1)
		want := fmt.Sprintf("poll-%d", i)
		m.Front = msg.Buffers{[]byte(want)}
		if err := conn.Send(m); err != nil {
			t.Fatal(err)
		}
		r := recv(t, col.ch)
		if r.Header.Tid != uint64(i+1) || !bytes.Equal(r.Front.Bytes(), []byte(want)) {
			t.Fatalf("reply %d: tid %d, front %q", i, r.Header.Tid, r.Front.Bytes())
		}
	}
}

// TestBusyPoll: with Config.BusyPoll, the readers of both sides of a
// round trip over TCP or a Unix socket find the next message by polling
// rather than by sleeping (counted as busy_poll_hits); without it
// nothing polls.
func TestBusyPoll(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("sockets are polled on Linux only")
	}
	reg := transport.NewRegistry(transport.NewTCP(transport.TCPOptions{}), transport.NewUnix())
	const rounds = 200
	for _, listen := range []string{"tcp://127.0.0.1:0", "unix://" + filepath.Join(t.TempDir(), "poll.sock")} {
		for _, busy := range []time.Duration{0, msgr.MaxBusyPoll} {
			t.Run(fmt.Sprint(listen[:strings.Index(listen, ":")], "/busy=", busy), func(t *testing.T) {
				addr := listen
				if busy != 0 && strings.HasPrefix(listen, "unix://") {
					addr += "2"
				}
				srv := echoServer(t, reg, addr, msgr.Config{BusyPoll: busy})
				cli, col := newClient(t, reg, msgr.Config{BusyPoll: busy})
				echoRounds(t, cli, col, srv, rounds)
				ch, cs := pollCounts(cli)
				sh, ss := pollCounts(srv)
				t.Logf("client: %v hits, %v sleeps; server: %v hits, %v sleeps", ch, cs, sh, ss)
				if busy == 0 {
					if ch+cs+sh+ss != 0 {
						t.Fatalf("polled without BusyPoll: client %v/%v, server %v/%v", ch, cs, sh, ss)
					}
					return
				}
				// Each side waits once per round for the other's
				// message, well within 10 ms: nearly every wait ends in
				// a hit.
				if ch < rounds/2 || sh < rounds/2 {
					t.Fatalf("client %v hits, server %v, in %d round trips: the readers slept", ch, sh, rounds)
				}
			})
		}
	}
}

// TestBusyPollBacksOff: a reader whose peer answers later than BusyPoll
// stops polling: each poll that ends empty halves the next, so the
// polls that found nothing stay few however many waits follow, and
// none of the late replies is found by polling.
func TestBusyPollBacksOff(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("sockets are polled on Linux only")
	}
	reg := transport.NewRegistry(transport.NewTCP(transport.TCPOptions{}))
	const late = 20 * time.Millisecond
	srv := echoServerAfter(t, reg, "tcp://127.0.0.1:0", msgr.Config{}, func() { time.Sleep(late) })
	cli, col := newClient(t, reg, msgr.Config{BusyPoll: time.Millisecond})
	const rounds = 30
	echoRounds(t, cli, col, srv, rounds)
	hits, sleeps := pollCounts(cli)
	// 1 ms halved to below 1 µs takes 10 polls; they all end empty.
	if sleeps < 1 || sleeps > 11 || hits > 1 {
		t.Fatalf("%v polls ended empty and %v hit in %d waits of %v: want 1 to 11 and at most 1 (the poll backs off)", sleeps, hits, rounds, late)
	}
}

// TestBusyPollConfig: BusyPoll outside [0, MaxBusyPoll] is refused.
func TestBusyPollConfig(t *testing.T) {
	for _, d := range []time.Duration{-time.Microsecond, msgr.MaxBusyPoll + 1} {
		_, err := msgr.New(msgr.Config{BusyPoll: d, Logger: quietLogger()})
		if err == nil || !errors.Is(err, msgr.ErrInvalidConfig) {
			t.Fatalf("BusyPoll %v: %v, want an invalid-config error", d, err)
		}
	}
	m, err := msgr.New(msgr.Config{BusyPoll: msgr.MaxBusyPoll, Logger: quietLogger()})
	if err != nil {
		t.Fatalf("BusyPoll %v: %v", msgr.MaxBusyPoll, err)
	}
	m.Shutdown()
}
