package msgr1

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/ferrymsg/ferry/msg"
)

// fuzzLimits keep what fuzzed input may declare small.
var fuzzLimits = Limits{MaxAuthorizer: 512, MaxSegment: 1 << 12, MaxMessage: 1 << 13}

// transcript runs a handshake and a few messages between a client and a
// server and returns what each received: seeds for FuzzEngine.
func transcript(t testing.TB, cc, sc Config) (toClient, toServer []byte) {
	c, s := NewEngine(cc), NewEngine(sc)
	c.Start()
	s.Start()
	var inC, inS []byte
	pump := func(e *Engine, in *[]byte, rec *[]byte) {
		for {
			n, _ := e.Need()
			if n == 0 && e.state == stDecide && e.cfg.Role == Server {
				_ = e.Accept(Accept{GlobalSeq: 3, InSeq: 1})
				continue
			}
			if n == 0 || n > len(*in) {
				return
			}
			*rec = append(*rec, (*in)[:n]...)
			if _, err := e.Feed(bytes.Clone((*in)[:n])); err != nil {
				return
			}
			*in = (*in)[n:]
		}
	}
	for range 20 {
		inS = append(inS, c.Output()...)
		inC = append(inC, s.Output()...)
		pump(c, &inC, &toClient)
		pump(s, &inS, &toServer)
	}
	if c.Ready() && s.Ready() {
		var b []byte
		for i := uint64(1); i <= 3; i++ {
			b = c.AppendMessage(b, testMessage(i+1, "front", "mid", "data"))
		}
		b = c.AppendAck(b, 2)
		b = c.AppendKeepalive(b, Stamp{1, 2})
		b = c.AppendKeepaliveAck(b, Stamp{3, 4})
		b = append(b, byte(TagKeepalive))
		b = c.AppendClose(b)
		toServer = append(toServer, b...)
		b = nil
		b = s.AppendMessage(b, testMessage(5, "", "", "x"))
		b = s.AppendKeepalive(b, Stamp{1, 2})
		toClient = append(toClient, b...)
	}
	return toClient, toServer
}

// fixMessage rewrites the CRCs (and, with a key, the signature) of a
// message piece the engine is about to read, so that the fuzzer explores
// what lies behind them.
func fixMessage(e *Engine, p []byte) {
	switch e.state {
	case stMsgHeader:
		binary.LittleEndian.PutUint32(p[headerCRCLen:], msg.CRC32C(0, p[:headerCRCLen]))
	case stMsgBody:
		h := &e.hdr
		end := int(h.PayloadLen())
		fo, mo := int(h.FrontLen), int(h.FrontLen+h.MiddleLen)
		ft := p[end:]
		le := binary.LittleEndian
		le.PutUint32(ft, msg.CRC32C(0, p[:fo]))
		le.PutUint32(ft[4:], msg.CRC32C(0, p[fo:mo]))
		le.PutUint32(ft[8:], msg.CRC32C(0, p[mo:end]))
		if e.signer != nil && len(ft) == FooterLen {
			f, _ := ParseFooter(ft, e.peer.Features)
			sig := e.signer.sign(sigBlock(h, &f), e.peer.Features&FeatureCephxV2 != 0)
			le.PutUint64(ft[12:], sig)
		}
	}
}

// FuzzEngine feeds arbitrary bytes to an engine of either role (with or
// without the fake auth method), answering its decisions from the input
// too. It must never panic, fail with an untyped error, ask for more than
// the limits allow, or deliver a message whose payload it did not check.
func FuzzEngine(f *testing.F) {
	for _, authed := range []bool{false, true} {
		cc, sc := clientConfig(), serverConfig()
		if authed {
			cc, sc, _, _ = osdConfigs(true)
		}
		toC, toS := transcript(f, cc, sc)
		f.Add(false, authed, false, toC)
		f.Add(true, authed, false, toS)
		f.Add(false, authed, true, toC)
		f.Add(true, authed, true, toS)
	}
	f.Add(true, false, false, []byte("ceph v027"))
	f.Add(false, false, false, []byte("ceph v2\n\x10\x00"))
	f.Fuzz(func(t *testing.T, server, authed, fix bool, data []byte) {
		cc, sc := clientConfig(), serverConfig()
		if authed {
			cc, sc, _, _ = osdConfigs(len(data)%2 == 0)
		}
		cfg := cc
		if server {
			cfg = sc
		}
		cfg.Limits = fuzzLimits
		e := NewEngine(cfg)
		e.Start()
		bound := max(ServerBannerLen, int(fuzzLimits.MaxAuthorizer))
		for steps := 0; steps < 10000; steps++ {
			_ = e.Output()
			n, retain := e.Need()
			if n == 0 && e.state == stDecide {
				if len(data) == 0 {
					return
				}
				d := data[0]
				data = data[1:]
				var err error
				if server {
					switch d % 6 {
					case 0:
						err = e.Accept(Accept{GlobalSeq: 2, InSeq: uint64(d)})
					case 1:
						err = e.Accept(Accept{Reset: true, Lossy: true})
					case 2:
						err = e.RetrySession(uint32(d))
					case 3:
						err = e.RetryGlobalSeq(uint32(d))
					case 4:
						err = e.Reset()
					default:
						err = e.Wait()
					}
				} else {
					err = e.RetryGlobal(uint32(d))
				}
				if err != nil {
					checkTyped(t, err)
					return
				}
				continue
			}
			if n == 0 {
				return
			}
			if n < 0 || (!e.Ready() && n > bound) {
				t.Fatalf("asks for %d bytes before ready", n)
			}
			if e.Ready() && n > 1+int(fuzzLimits.MaxMessage)+FooterLen {
				t.Fatalf("asks for %d bytes", n)
			}
			if n > len(data) {
				if _, err := e.Feed(data); err == nil {
					t.Fatal("short feed accepted")
				} else {
					checkTyped(t, err)
				}
				return
			}
			p := bytes.Clone(data[:n])
			data = data[n:]
			if fix {
				fixMessage(e, p)
			}
			_ = retain
			evs, err := e.Feed(p)
			if err != nil {
				checkTyped(t, err)
				if e.Ready() {
					t.Fatal("ready after an error")
				}
				return
			}
			for _, ev := range evs {
				if ev.Kind == EvMessage && !ev.Dropped {
					m := ev.Msg
					if m == nil || uint32(m.Len()) > fuzzLimits.MaxMessage || m.Header.Seq != ev.Seq {
						t.Fatalf("message event %+v", ev)
					}
					if m.Footer.FrontCRC != m.Front.CRC(0) || m.Footer.MiddleCRC != m.Middle.CRC(0) {
						t.Fatalf("unchecked payload delivered")
					}
				}
			}
		}
	})
}

// FuzzCodec decodes arbitrary bytes as every msgr1 structure; whatever
// decodes must re-encode to the same bytes.
func FuzzCodec(f *testing.F) {
	f.Add(unhex(f, connectToMonHex))
	f.Add(unhex(f, seqReplyHex))
	f.Add(monScript(f)[:ServerBannerLen])
	fr := MessageFrame{Header: Header{Seq: 3, Src: msg.EntityName{Type: msg.EntityOSD, Num: 2}}, Front: msg.Buffers{[]byte("x")}, Features: msg.FeaturesAll}
	w := fr.Append(nil)
	f.Add(w[1 : 1+HeaderLen])
	f.Add(w[len(w)-FooterLen:])
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) >= ConnectLen {
			c, err := ParseConnect(data[:ConnectLen])
			if err != nil || !bytes.Equal(c.Append(nil), data[:ConnectLen]) {
				t.Fatalf("connect %+v %v", c, err)
			}
		}
		if len(data) >= ConnectReplyLen {
			r, err := ParseConnectReply(data[:ConnectReplyLen])
			if err != nil || !bytes.Equal(r.Append(nil), data[:ConnectReplyLen]) {
				t.Fatalf("reply %+v %v", r, err)
			}
		}
		if len(data) >= HeaderLen {
			p := bytes.Clone(data[:HeaderLen])
			binary.LittleEndian.PutUint32(p[headerCRCLen:], msg.CRC32C(0, p[:headerCRCLen]))
			h, err := ParseHeader(p)
			if err != nil {
				t.Fatalf("header: %v", err)
			}
			if enc, crc := h.Append(nil); !bytes.Equal(enc, p) || crc != h.CRC {
				t.Fatalf("header re-encodes as %x, was %x", enc, p)
			}
			if _, err := ParseHeader(data[:HeaderLen]); err != nil {
				checkTyped(t, err)
			}
		}
		for _, feat := range []uint64{0, msg.FeaturesAll} {
			if n := FooterSize(feat); len(data) >= n {
				ft, err := ParseFooter(data[:n], feat)
				if err != nil || !bytes.Equal(AppendFooter(nil, &ft, feat), data[:n]) {
					t.Fatalf("footer %+v %v", ft, err)
				}
			}
		}
		if len(data) >= ServerBannerLen {
			if s, me, err := ParseServerBanner(data[:ServerBannerLen]); err == nil {
				if _, _, err := ParseServerBanner(AppendServerBanner(nil, s, me)); err != nil {
					t.Fatalf("server banner %v %v: %v", s, me, err)
				}
			} else {
				checkTyped(t, err)
			}
		}
		if len(data) >= ClientBannerLen {
			if _, err := ParseClientBanner(data[:ClientBannerLen]); err != nil {
				checkTyped(t, err)
			}
		}
	})
}
