package msgr_test

import (
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/msgr/msgr2"
	"github.com/ferrymsg/ferry/transport"
)

// Many connections that declare 200 MiB messages and start sending them
// before authenticating make the server allocate little more than each
// socket's read buffer: the MESSAGE is refused from its preamble and the
// connection closed; an honest client is served meanwhile.
func TestPreAuthMessageRefused(t *testing.T) {
	s := echoServer(t, transport.Default, "tcp://127.0.0.1:0", msgr.Config{})
	addr := strings.TrimPrefix(s.ListenAddrs()[0], "tcp://")
	var hello []byte
	hello = msgr2.AppendBanner(hello, msgr2.FeatureRevision1, 0)
	hello = msgr2.AppendFrame(hello, msgr2.TagHello, true, (&msgr2.Hello{EntityType: msg.EntityClient}).Append(nil))
	big := msgr2.Preamble{Tag: msgr2.TagMessage, NumSegments: 4, Segments: [4]msgr2.SegmentDesc{
		{Len: msgr2.Header2Len, Align: 8}, {}, {}, {Len: 200 << 20, Align: 4096}}}
	attack := append(append([]byte(nil), hello...), big.Append(nil)...)
	junk := make([]byte, 256<<10)

	const n = 64
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var wg sync.WaitGroup
	closed := make(chan bool, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				closed <- false
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(20 * time.Second))
			go func() {
				if _, err := c.Write(attack); err != nil {
					return
				}
				for k := 0; k < 16; k++ { // keep sending the "body"
					if _, err := c.Write(junk); err != nil {
						return
					}
				}
			}()
			_, err = io.Copy(io.Discard, c) // until the server closes
			closed <- err == nil || !isTimeout(err)
		}()
	}
	c, col := newClient(t, transport.Default, msgr.Config{})
	if err := mustConnect(t, c, s.ListenAddrs()[0]).Send(msg.New(testType)); err != nil {
		t.Fatal(err)
	}
	recv(t, col.ch)
	wg.Wait()
	runtime.ReadMemStats(&after)
	for i := 0; i < n; i++ {
		if !<-closed {
			t.Fatal("an attacking connection was not closed by the server")
		}
	}
	// Per connection: a 64 KiB read buffer, the engine and the pre-auth
	// transcript; nothing sized by the declared 200 MiB.
	per := (after.TotalAlloc - before.TotalAlloc) / n
	t.Logf("allocated %d bytes per attacking connection", per)
	if per > 256<<10 {
		t.Fatalf("%d bytes allocated per connection that declared a 200 MiB message before authenticating", per)
	}
}
