package msgr_test

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/transport"
)

// TestV2ListenerClosesMsgr1Banner: a msgr1 client sends its 9-byte
// banner and waits for the server's; a v2 listener closes it at once
// rather than at the end of its handshake timeout (10 s).
func TestV2ListenerClosesMsgr1Banner(t *testing.T) {
	srv := echoServer(t, transport.Default, "v2:127.0.0.1:0", msgr.Config{})
	addr := srv.Addrs()[0].IP.String()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("ceph v027")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(8 * time.Second))
	// The server's own banner may come first; then the connection ends.
	_, err = io.Copy(io.Discard, c)
	if err != nil && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("reading until the server closes: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("closed after %v, want at once", d)
	}
}
