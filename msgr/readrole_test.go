package msgr_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/transport"
)

// goid returns the calling goroutine's id, parsed from its stack header.
func goid() string {
	var b [64]byte
	n := runtime.Stack(b[:], false)
	f := bytes.Fields(b[:n])
	if len(f) < 2 {
		return ""
	}
	return string(f[1])
}

// awaitClient is a client whose fast dispatcher records which goroutine
// delivered each reply and signals sig.
type awaitClient struct {
	mu      sync.Mutex
	byGo    map[uint64]string // tid -> goroutine that delivered it
	replies chan *msg.Message
	sig     chan struct{}
}

func (a *awaitClient) CanFastDispatch(m *msg.Message) bool { return m.Header.Type == testType }
func (a *awaitClient) FastDispatch(m *msg.Message) {
	a.mu.Lock()
	a.byGo[m.Header.Tid] = goid()
	a.mu.Unlock()
	a.replies <- m
	select {
	case a.sig <- struct{}{}:
	default:
	}
}
func (a *awaitClient) Dispatch(m *msg.Message) bool { a.FastDispatch(m); return true }

func newAwaitClient(t *testing.T, cfg msgr.Config) (*msgr.Messenger, *awaitClient) {
	t.Helper()
	cfg.Transports = transport.Default
	cfg.Logger = quietLogger()
	c, err := msgr.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a := &awaitClient{byGo: map[uint64]string{}, replies: make(chan *msg.Message, 1024), sig: make(chan struct{}, 1)}
	c.AddDispatcherTail(a)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	return c, a
}

// awaitPair connects a new awaitClient to a new TCP echo server.
func awaitPair(t *testing.T) (*msgr.Conn, *awaitClient) {
	t.Helper()
	s := echoServer(t, transport.Default, "tcp://127.0.0.1:0", msgr.Config{})
	c, a := newAwaitClient(t, msgr.Config{})
	conn, err := c.Connect(s.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	return conn, a
}

// awaitReply sends tid and waits for its echo in Await.
func awaitReply(t *testing.T, conn *msgr.Conn, a *awaitClient, tid uint64) *msg.Message {
	t.Helper()
	m := msg.New(testType)
	m.Header.Tid = tid
	m.Front = msg.Buffers{[]byte("ping")}
	if err := conn.Send(m); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		select {
		case r := <-a.replies:
			if r.Header.Tid != tid {
				t.Fatalf("reply tid %d, want %d", r.Header.Tid, tid)
			}
			return r
		default:
		}
		if _, err := conn.Await(ctx, a.sig); err != nil {
			t.Fatalf("tid %d: %v", tid, err)
		}
	}
}

// TestAwaitReadsInCaller: a goroutine waiting in Await for the reply to
// its message reads it itself; the reply is delivered on that goroutine,
// not on the connection's reader goroutine (the hand-off Await saves).
func TestAwaitReadsInCaller(t *testing.T) {
	conn, a := awaitPair(t)
	me := goid()
	const n = 200
	mine := 0
	for tid := uint64(1); tid <= n; tid++ {
		awaitReply(t, conn, a, tid)
		a.mu.Lock()
		if a.byGo[tid] == me {
			mine++
		}
		a.mu.Unlock()
	}
	// The first replies may come while the reader goroutine still holds
	// the role; after that, the caller keeps it between calls.
	if mine < n/2 {
		t.Fatalf("%d of %d replies were delivered on the awaiting goroutine", mine, n)
	}
	// Unsolicited messages are still read once nobody awaits: the
	// reader goroutine takes the role back.
	m := msg.New(testType)
	m.Header.Tid = n + 1
	if err := conn.Send(m); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-a.replies:
		if r.Header.Tid != n+1 {
			t.Fatalf("tid %d", r.Header.Tid)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a reply nobody awaited was not delivered")
	}
}

// TestAwaitContextEnds: Await returns ctx's error when nothing comes, and
// the connection keeps delivering afterwards.
func TestAwaitContextEnds(t *testing.T) {
	conn, a := awaitPair(t)
	awaitReply(t, conn, a, 1)
	never := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	got, err := conn.Await(ctx, never)
	if got || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Await = %v, %v; want false, DeadlineExceeded", got, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Await took %v to see its context end", d)
	}
	for tid := uint64(2); tid < 20; tid++ {
		awaitReply(t, conn, a, tid)
	}
}

// TestAwaitNudge: done made ready by another goroutine, followed by
// Nudge, ends an Await that is blocked reading the socket.
func TestAwaitNudge(t *testing.T) {
	conn, a := awaitPair(t)
	awaitReply(t, conn, a, 1)
	done := make(chan struct{}, 1)
	go func() {
		time.Sleep(20 * time.Millisecond) // let Await block in its read
		done <- struct{}{}
		conn.Nudge()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := conn.Await(ctx, done)
	if !got || err != nil {
		t.Fatalf("Await = %v, %v; want true, nil", got, err)
	}
	awaitReply(t, conn, a, 2)
}

// TestAwaitSocketFailure: a socket that fails while a caller reads it in
// Await is handled as if the reader goroutine had read the failure: the
// lossless session reconnects and replays, and every message arrives
// once, in order.
func TestAwaitSocketFailure(t *testing.T) {
	scfg := msgr.Config{Inject: msgr.Inject{SocketFailures: 40}}
	s := echoServer(t, transport.Default, "tcp://127.0.0.1:0", scfg)
	s.SetDefaultPolicy(msgr.StatefulServer())
	c, a := newAwaitClient(t, msgr.Config{})
	c.SetDefaultPolicy(msgr.LosslessClient())
	conn, err := c.Connect(s.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	for tid := uint64(1); tid <= 300; tid++ {
		awaitReply(t, conn, a, tid)
	}
	if conn.Reconnects() == 0 {
		t.Fatal("no socket failed: the test exercised nothing")
	}
}

// TestAwaitConcurrent: many goroutines awaiting replies on one
// connection, each its own, while the reader role moves between them and
// the reader goroutine (run with -race).
func TestAwaitConcurrent(t *testing.T) {
	s := echoServer(t, transport.Default, "tcp://127.0.0.1:0", msgr.Config{})
	cfg := msgr.Config{Transports: transport.Default, Logger: quietLogger()}
	c, err := msgr.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const workers, each = 8, 100
	var chans [workers]chan struct{}
	var got [workers]atomic.Int64
	for i := range chans {
		chans[i] = make(chan struct{}, 1)
	}
	c.AddDispatcherTail(msgr.DispatcherFunc(func(m *msg.Message) bool {
		w := m.Header.Tid % workers
		got[w].Add(1)
		chans[w] <- struct{}{}
		m.Conn.(*msgr.Conn).Nudge()
		return true
	}))
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	conn, err := c.Connect(s.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range awaitWorkers(conn, chans[:], each) {
		t.Fatal(err)
	}
	for w := range workers {
		if n := got[w].Load(); n != each {
			t.Fatalf("worker %d got %d replies, want %d", w, n, each)
		}
	}
}

// TestIdleReaderParks: a connection that has received nothing for a
// while waits for its next frame without a read buffer; it then reads
// as before, whether the reader goroutine or an Await takes the frame.
func TestIdleReaderParks(t *testing.T) {
	defer msgr.SetParkAfter(50 * time.Millisecond)()
	// The client's timer ticks every 100 ms (a quarter of its keepalive
	// timeout); the server's keepalives every 150 ms keep it open and
	// leave it idle for longer than 50 ms between them.
	s := echoServer(t, transport.Default, "tcp://127.0.0.1:0", msgr.Config{KeepaliveInterval: 150 * time.Millisecond})
	c, a := newAwaitClient(t, msgr.Config{KeepaliveInterval: 300 * time.Millisecond, KeepaliveTimeout: 400 * time.Millisecond})
	conn, err := c.Connect(s.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	awaitReply(t, conn, a, 1)
	parked := func(what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !conn.ReaderParked() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the idle connection's reader never parked", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	parked("first")
	// The reader goroutine takes a frame that arrives while it is parked.
	m := msg.New(testType)
	m.Header.Tid = 2
	if err := conn.Send(m); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-a.replies:
		if r.Header.Tid != 2 {
			t.Fatalf("tid %d", r.Header.Tid)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no reply while parked")
	}
	parked("second")
	// An Await takes the role from a parked reader.
	for tid := uint64(3); tid < 10; tid++ {
		awaitReply(t, conn, a, tid)
	}
}

// TestAwaitConnectionCloses: Await returns an error matching ErrClosed
// when its connection closes for good, whether it was reading or not.
func TestAwaitConnectionCloses(t *testing.T) {
	conn, a := awaitPair(t)
	awaitReply(t, conn, a, 1)
	go func() {
		time.Sleep(20 * time.Millisecond) // let Await block in its read
		conn.MarkDown()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := conn.Await(ctx, make(chan struct{}))
	if got || !errors.Is(err, msgr.ErrClosed) {
		t.Fatalf("Await = %v, %v; want false, ErrClosed", got, err)
	}
	if got, err := conn.Await(ctx, make(chan struct{})); got || !errors.Is(err, msgr.ErrClosed) {
		t.Fatalf("Await on a closed connection = %v, %v; want false, ErrClosed", got, err)
	}
}

// awaitWorkers runs one goroutine per channel of chans, each sending
// each messages of testType on conn (worker w's tids are w, w+n, w+2n...
// for n workers) and awaiting, after each, the signal its dispatcher
// gives on chans[w]. It returns the workers' errors once all have ended.
func awaitWorkers(conn *msgr.Conn, chans []chan struct{}, each int) []error {
	workers := len(chans)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for i := range each {
				m := msg.New(testType)
				m.Header.Tid = uint64(i*workers + w)
				if err := conn.Send(m); err != nil {
					errs <- fmt.Errorf("worker %d, request %d: send: %w", w, i, err)
					return
				}
				if ok, err := conn.Await(ctx, chans[w]); !ok {
					errs <- fmt.Errorf("worker %d, request %d: await: %v", w, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return all
}
