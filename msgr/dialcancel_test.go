package msgr_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/transport"
)

// stuckDial is a transport whose dials connect nowhere: they wait for
// their context, and report on ended when it is done.
type stuckDial struct{ ended chan error }

func (s *stuckDial) Name() string { return "stuck" }
func (s *stuckDial) Listen(context.Context, transport.Addr) (transport.Listener, error) {
	return nil, errors.New("stuck: no listening")
}
func (s *stuckDial) Dial(ctx context.Context, a transport.Addr) (transport.Conn, error) {
	<-ctx.Done()
	s.ended <- ctx.Err()
	return nil, ctx.Err()
}

// TestMarkDownCancelsDial: marking a connection down while it dials
// cancels the dial at once (not at the handshake timeout), and the
// messenger then shuts down without waiting for it.
func TestMarkDownCancelsDial(t *testing.T) {
	sd := &stuckDial{ended: make(chan error, 4)}
	reg := transport.NewRegistry(sd)
	cli, _ := newClient(t, reg, msgr.Config{HandshakeTimeout: time.Minute})
	conn, err := cli.Connect("stuck://nowhere")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-sd.ended:
		t.Fatalf("the dial ended before the mark-down: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	conn.MarkDown()
	select {
	case err := <-sd.ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the dial ended with %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the dial went on after the connection was marked down")
	}
	done := make(chan struct{})
	go func() { cli.Shutdown(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown waited for the dial")
	}
}

// badAddrDial is a transport that rejects every address it is asked to
// dial, as the shm transport does a name with a '/' in it.
type badAddrDial struct{ dials chan struct{} }

func (b *badAddrDial) Name() string { return "badaddr" }
func (b *badAddrDial) Listen(context.Context, transport.Addr) (transport.Listener, error) {
	return nil, errors.New("badaddr: no listening")
}
func (b *badAddrDial) Dial(_ context.Context, a transport.Addr) (transport.Conn, error) {
	b.dials <- struct{}{}
	return nil, &transport.AddrError{Input: a.String(), Reason: "no such place", Err: transport.ErrBadAddr}
}

// refusedCounter counts HandleRefused events and dispatches nothing.
type refusedCounter struct{ n atomic.Int32 }

func (r *refusedCounter) Dispatch(*msg.Message) bool { return false }
func (r *refusedCounter) HandleRefused(*msgr.Conn)   { r.n.Add(1) }

// TestConnectUnknownScheme: an address whose scheme has no transport in
// Config.Transports fails in Connect, with ErrUnknownScheme, rather than
// yielding a connection that retries a dial that can never work.
func TestConnectUnknownScheme(t *testing.T) {
	reg := transport.NewRegistry(&badAddrDial{dials: make(chan struct{}, 1)})
	cli, _ := newClient(t, reg, msgr.Config{})
	for _, addr := range []string{"unix:///tmp/nothing.sock", "tcp://127.0.0.1:1"} {
		c, err := cli.Connect(addr)
		if !errors.Is(err, transport.ErrUnknownScheme) || c != nil {
			t.Errorf("Connect(%q): conn %v, err %v; want no conn and ErrUnknownScheme", addr, c != nil, err)
		}
	}
}

// TestDialBadAddrFailsForGood: a dial the transport refuses for its
// address is not retried, under a lossless policy either: the
// connection closes with that error, which Ready and Err report. In a
// bubble, so that a second of backoffs passes in virtual time.
func TestDialBadAddrFailsForGood(t *testing.T) {
	for _, p := range []struct {
		name   string
		policy msgr.Policy
	}{{"lossy", msgr.LossyClient()}, {"lossless", msgr.LosslessPeer()}} {
		t.Run(p.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				bd := &badAddrDial{dials: make(chan struct{}, 1024)}
				reg := transport.NewRegistry(bd)
				cli, _ := newClient(t, reg, msgr.Config{InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond})
				refused := &refusedCounter{}
				cli.AddDispatcherHead(refused)
				cli.SetDefaultPolicy(p.policy)
				conn, err := cli.Connect("badaddr://x/y")
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // virtual
				defer cancel()
				if err := conn.Ready(ctx); !errors.Is(err, transport.ErrBadAddr) {
					t.Fatalf("Ready: %v, want ErrBadAddr", err)
				}
				if err := conn.Err(); !errors.Is(err, transport.ErrBadAddr) {
					t.Fatalf("Err: %v, want ErrBadAddr", err)
				}
				time.Sleep(time.Second) // a thousand backoffs, had it retried
				synctest.Wait()
				if n := len(bd.dials); n != 1 {
					t.Fatalf("%d dials, want 1", n)
				}
				// Told as a refusal, so that what waits on the
				// connection (an rpc request) fails at once.
				if got := refused.n.Load(); got != 1 {
					t.Fatalf("%d refused events, want 1", got)
				}
			})
		})
	}
}
