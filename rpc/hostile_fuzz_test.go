package rpc_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/rpc"
	"github.com/ferrymsg/ferry/rpc/internal/wire"
)

// fuzzRecord appends one message for FuzzHostilePeer: kind picks the
// message type (kind%3: request, reply, bulk); kind&0x80 puts the key of
// a buffer the server registered (write-only) at the bulk header's key
// field, so that the fuzzer reaches the paths behind a valid key.
func fuzzRecord(b []byte, kind byte, front, data []byte) []byte {
	b = append(b, kind)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(front)))
	b = append(b, front...)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(data)))
	return append(b, data...)
}

// FuzzHostilePeer sends a server whatever messages the fuzzer makes up,
// on a connection of their own, then checks that the server still
// serves an honest client on another connection: an RPC, an RPC whose
// input and output overflow into bulk, and a GET of a registered buffer
// (its bytes checked). Whatever the hostile messages do (malformed,
// forged, out of order, never answered), they must not panic the server,
// hang it or touch another peer's transfers.
func FuzzHostilePeer(f *testing.F) {
	n := newNet()
	srv := n.server(f, 0, 1, rpc.Options{Timeout: time.Second,
		Bulk: rpc.BulkOptions{EagerLimit: 1024, ChunkSize: 4096, Window: 8192, OverflowLimit: 64 << 10}}, echoProto())
	src := make([]byte, 64<<10)
	for i := range src {
		src[i] = byte(i * 7)
	}
	held := register(f, srv, [][]byte{src}, rpc.BulkRO)
	// The fuzzer gets the key of a write-only buffer: peers' PUTs into a
	// buffer that is being read for a GET are the application's race to
	// avoid (as with registered memory anywhere), not the server's.
	key := register(f, srv, [][]byte{make([]byte, 64<<10)}, rpc.BulkWO).Handle().Key
	cli := n.client(f, rpc.Options{}, []*rpc.Instance{srv})
	cctx := newCtx(f, cli, rpc.ContextOptions{Auto: true})
	dst := make([]byte, 10000)
	local := register(f, cli, [][]byte{dst}, rpc.BulkWO)
	evil := newRawPeer(f, n, "")
	stop := make(chan struct{})
	f.Cleanup(func() { close(stop) })
	go func() { // the server's answers are not looked at
		for {
			select {
			case m := <-evil.got:
				m.Done()
			case <-stop:
				return
			}
		}
	}()

	bulk := func(h wire.BulkHeader) []byte { return h.Append(nil) }
	req := func(h wire.Header, body []byte) []byte { return append(h.Append(nil), body...) }
	f.Add(fuzzRecord(nil, 0x82, bulk(wire.BulkHeader{Op: wire.BulkGetReq, Xfer: 1, Len: 4096}), nil))
	f.Add(fuzzRecord(nil, 0x82, bulk(wire.BulkHeader{Op: wire.BulkPut, Xfer: 2, Off: 8, Len: 5}), []byte("hello")))
	f.Add(fuzzRecord(nil, 0x82, bulk(wire.BulkHeader{Op: wire.BulkRTS, Xfer: 3, Len: 4096, Key2: 9}), nil))
	f.Add(fuzzRecord(nil, 2, bulk(wire.BulkHeader{Op: wire.BulkData, Xfer: 1, Len: 3}), []byte("abc")))
	f.Add(fuzzRecord(nil, 2, bulk(wire.BulkHeader{Op: wire.BulkAck, Xfer: 2, Len: 5}), nil))
	f.Add(fuzzRecord(nil, 0x82, bulk(wire.BulkHeader{Op: wire.BulkDirectReq, Xfer: 4, Len: 64}), nil))
	f.Add(fuzzRecord(nil, 0, req(wire.Header{Opcode: uint32(opOvfEcho), Flags: wire.FlagHasData}, nil), []byte("echo")))
	f.Add(fuzzRecord(nil, 0, req(wire.Header{Opcode: uint32(opOvfEcho), Flags: wire.FlagBulkIn | wire.FlagHasData}, ovfDesc(5, 4096)), nil))
	f.Add(fuzzRecord(nil, 1, req(wire.Header{Opcode: uint32(opOvfEcho), Flags: wire.FlagBulkOut | wire.FlagHasData}, ovfDesc(5, 4096)), nil))
	f.Add(fuzzRecord(fuzzRecord(nil, 0, req(wire.Header{Opcode: uint32(rpc.OpSelfTest)}, []byte{1, 2, 3}), nil), 0x82, []byte{1, 0xEE}, nil))

	f.Fuzz(func(t *testing.T, in []byte) {
		conn, err := evil.m.Connect(srv.URI())
		if err != nil {
			t.Fatal(err)
		}
		for sent := 0; len(in) >= 3 && sent < 16; sent++ {
			kind := in[0]
			fl := int(binary.LittleEndian.Uint16(in[1:]))
			in = in[3:]
			front := in[:min(fl, len(in))]
			in = in[len(front):]
			var data []byte
			if len(in) >= 2 {
				dl := int(binary.LittleEndian.Uint16(in))
				in = in[2:]
				data = in[:min(dl, len(in))]
				in = in[len(data):]
			}
			front = append([]byte(nil), front...)
			if kind&0x80 != 0 && len(front) >= 32 {
				binary.LittleEndian.PutUint64(front[24:], key)
			}
			m := msg.New([]uint16{wire.TypeRequest, wire.TypeReply, wire.TypeBulk}[int(kind&0x7f)%3])
			m.Header.Tid = uint64(kind)
			m.SetSegments(front, nil, append([]byte(nil), data...))
			if conn.Send(m) != nil {
				m.Done()
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := cctx.Ping(ctx, rpc.Endpoint{}); err != nil {
			t.Fatalf("honest ping: %v", err)
		}
		echo := bytes.Repeat([]byte{0x5A}, 20<<10) // overflows both ways
		var out rpc.Bytes
		e := rpc.Bytes(echo)
		if err := cctx.Call(ctx, rpc.Endpoint{}, opOvfEcho, &e, &out); err != nil || !bytes.Equal(out, echo) {
			t.Fatalf("honest overflowing echo: %v (equal %v)", err, bytes.Equal(out, echo))
		}
		clear(dst)
		if err := cctx.TransferWait(ctx, rpc.BulkDesc{Op: rpc.BulkGet, Remote: held.Handle(), RemoteOff: 100, Local: local, Len: int64(len(dst)), Peer: &rpc.Endpoint{}}); err != nil {
			t.Fatalf("honest GET: %v", err)
		}
		if !bytes.Equal(dst, src[100:100+len(dst)]) {
			t.Fatal("honest GET: bytes differ from the holder's buffer")
		}
	})
}
