package msgr_test

import (
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/transport"
)

// TestShutdownDuringHandshake: Shutdown ends handshakes in progress at
// once (they used to run on until Config.HandshakeTimeout, and Shutdown
// waited for them), for msgr2 and msgr1 listeners alike.
func TestShutdownDuringHandshake(t *testing.T) {
	for _, listen := range []string{"tcp://127.0.0.1:0", "v1:127.0.0.1:0"} {
		t.Run(listen[:3], func(t *testing.T) {
			s, err := msgr.New(msgr.Config{
				Name: msg.EntityName{Type: msg.EntityOSD, Num: 0}, Transports: transport.Default, Logger: quietLogger(),
				HandshakeTimeout: 30 * time.Second,
			})
			if err != nil {
				t.Fatal(err)
			}
			s.SetDefaultPolicy(msgr.StatelessServer())
			if err := s.Bind(listen); err != nil {
				t.Fatal(err)
			}
			if err := s.Start(); err != nil {
				t.Fatal(err)
			}
			addr := s.ListenAddrs()[0]
			if listen[:3] == "v1:" {
				addr = v1Addr(t, s)
			}
			nc := rawDial(t, addr)
			if _, err := nc.Write([]byte("ceph")); err != nil { // a banner begun, never finished
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond) // accepted and reading the banner
			done := make(chan struct{})
			start := time.Now()
			go func() { s.Shutdown(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				nc.Close()
				<-done
				t.Fatalf("Shutdown waited %v for a handshake in progress", time.Since(start))
			}
		})
	}
}
