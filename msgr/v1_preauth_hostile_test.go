package msgr_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/msgr/internal/authtest"
	"github.com/ferrymsg/ferry/msgr/msgr1"
	"github.com/ferrymsg/ferry/transport"
)

// rawV1Ready runs a msgr1 client handshake on c as a mon's client does
// (no authorizer: MAuth would follow) and returns once READY.
func rawV1Ready(t *testing.T, c net.Conn) {
	t.Helper()
	e := msgr1.NewEngine(msgr1.Config{Role: msgr1.Client, MyName: msg.EntityName{Type: msg.EntityClient, Num: -1},
		Nonce: 77, PeerType: msg.EntityMon, Supported: msg.FeaturesAll, Lossy: true, GlobalSeq: 1})
	e.Start()
	br := bufio.NewReader(c)
	for !e.Ready() {
		if out := e.Output(); len(out) > 0 {
			if _, err := c.Write(out); err != nil {
				t.Fatal(err)
			}
		}
		n, _ := e.Need()
		if n == 0 {
			t.Fatalf("msgr1 handshake stalled: %v", e.Err())
		}
		buf := make([]byte, n)
		if _, err := io.ReadFull(br, buf); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Feed(buf); err != nil {
			t.Fatal(err)
		}
	}
	if out := e.Output(); len(out) > 0 {
		if _, err := c.Write(out); err != nil {
			t.Fatal(err)
		}
	}
}

// TestV1PreAuthMessageRefused: a messenger that serves as a mon with an
// auth server (cephx-like) over msgr1 accepts its clients' connects
// without an authorizer, as Ceph's mons do: they are not authenticated
// until their MAuth login. Such a peer that declares a 200 MiB message
// (and starts sending it) is refused from the message header, and its
// connection closed at once, rather than given a message-sized body
// (issue 14, item 5: before the MAuth exchange only small messages).
func TestV1PreAuthMessageRefused(t *testing.T) {
	cfg := msgr.Config{
		Name:       msg.EntityName{Type: msg.EntityMon, Num: 0},
		Transports: transport.Default,
		Logger:     quietLogger(),
		Auth: msgr.AuthConfig{ServerFor: func(msg.EntityAddr) (auth.Server, error) {
			return &authtest.Server{Keys: map[string][]byte{"client.admin": adminKey}, GlobalID: 9}, nil
		}},
	}
	s, err := msgr.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.SetDefaultPolicy(msgr.StatelessServer())
	got := make(chan *msg.Message, 4)
	s.AddDispatcherTail(msgr.DispatcherFunc(func(m *msg.Message) bool { got <- m; return true }))
	if err := s.Bind("v1:127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	hostport, _, _ := strings.Cut(strings.TrimPrefix(v1Addr(t, s), "v1:"), "/")

	c, err := net.DialTimeout("tcp", hostport, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	rawV1Ready(t, c)
	h := msgr1.Header{Seq: 1, Type: 17, FrontLen: 200 << 20, Src: msg.EntityName{Type: msg.EntityClient, Num: -1}}
	b, _ := h.Append([]byte{byte(msgr1.TagMsg)})
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	go func() {
		junk := make([]byte, 64<<10)
		for i := 0; i < 16; i++ {
			if _, err := c.Write(junk); err != nil {
				return
			}
		}
	}()
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	_, err = io.Copy(io.Discard, c)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("the server is still reading a 200 MiB message from a msgr1 peer that has not authenticated (3 s after its header)")
	}
	select {
	case m := <-got:
		t.Fatalf("dispatched %v from an unauthenticated peer", m)
	default:
	}
}
