package msgr1

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/ceph"
	"github.com/ferrymsg/ferry/internal/cephtest"
	"github.com/ferrymsg/ferry/msg"
)

// serveV1 runs a server engine on one accepted socket: it accepts the
// session lossy and answers every MPing with status. It returns the
// events it saw.
func serveV1(nc net.Conn, me msg.EntityAddr, status []byte) ([]EventKind, error) {
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	cfg := Config{
		Role:      Server,
		MyName:    msg.EntityName{Type: msg.EntityMon},
		MyAddr:    me,
		PeerAddr:  msg.EntityAddr{Type: msg.AddrLegacy, IP: nc.RemoteAddr().(*net.TCPAddr).AddrPort()},
		Supported: msg.FeaturesAll,
	}
	e := NewEngine(cfg)
	e.Start()
	var seen []EventKind
	var seq uint64
	for {
		if out := e.Output(); len(out) > 0 {
			if _, err := nc.Write(out); err != nil {
				return seen, err
			}
		}
		n, _ := e.Need()
		if n == 0 {
			return seen, e.Err()
		}
		p := make([]byte, n) // a fresh buffer: message bodies are retained
		if _, err := io.ReadFull(nc, p); err != nil {
			if errors.Is(err, io.EOF) {
				return seen, nil
			}
			return seen, err
		}
		evs, err := e.Feed(p)
		if err != nil {
			return seen, err
		}
		for _, ev := range evs {
			seen = append(seen, ev.Kind)
			switch ev.Kind {
			case EvConnect:
				if err := e.Accept(Accept{GlobalSeq: 1, Lossy: true}); err != nil {
					return seen, err
				}
			case EvKeepalive:
				if !ev.Bare {
					e.out = e.AppendKeepaliveAck(e.out, ev.Stamp)
				}
			case EvMessage:
				if ev.Msg != nil && ev.Msg.Header.Type == ceph.MsgPing {
					r := ceph.PingReply(status)
					seq++
					r.Header.Seq = seq
					e.out = e.AppendMessage(e.out, r)
				}
			}
		}
	}
}

// TestCephCLIPingsServerEngine checks the server role against Ceph's own
// msgr1 client: `ceph ping mon.a` with "mon host = v1:…" talks to a
// server engine driven over a socket by this test, which answers its
// MPing.
func TestCephCLIPingsServerEngine(t *testing.T) {
	cephtest.RequireCLI(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	me := msg.EntityAddr{Type: msg.AddrLegacy, IP: l.Addr().(*net.TCPAddr).AddrPort()}
	status := []byte(`{"health":{"status":"HEALTH_OK"},"mon_status":{"name":"a","msgr1":true}}`)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var results []string
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				seen, err := serveV1(nc, me, status)
				mu.Lock()
				results = append(results, fmtKinds(seen)+": "+errString(err))
				mu.Unlock()
			}()
		}
	}()
	conf := cephtest.WriteClientConf(t.TempDir(), "v1:"+me.IP.String())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := cephtest.CLI(ctx, conf, "ping", "mon.a")
	l.Close()
	wg.Wait()
	t.Logf("sessions: %q", results)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		MonStatus struct {
			Name  string `json:"name"`
			Msgr1 bool   `json:"msgr1"`
		} `json:"mon_status"`
	}
	if err := json.Unmarshal(out, &got); err != nil || !got.MonStatus.Msgr1 || got.MonStatus.Name != "a" {
		t.Fatalf("ceph ping printed %s (%v)", out, err)
	}
}

func fmtKinds(k []EventKind) string {
	s := make([]string, len(k))
	for i, x := range k {
		s[i] = x.String()
	}
	return strings.Join(s, " ")
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}
