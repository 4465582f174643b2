package msgr_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
)

// A server that echoes every message and a client that sends one, over
// loopback TCP.
func Example() {
	srv, _ := msgr.New(msgr.Config{Name: msg.EntityName{Type: msg.EntityOSD, Num: 0}, Logger: quietLogger()})
	srv.SetDefaultPolicy(msgr.StatelessServer())
	srv.AddDispatcherTail(msgr.DispatcherFunc(func(m *msg.Message) bool {
		reply := msg.New(m.Header.Type)
		reply.Header.Tid = m.Header.Tid
		reply.Data = m.Data // echo without copying
		_ = m.Conn.Send(reply)
		return true
	}))
	if err := srv.Bind("tcp://127.0.0.1:0"); err != nil {
		panic(err)
	}
	_ = srv.Start()
	defer srv.Shutdown()

	cli, _ := msgr.New(msgr.Config{Logger: quietLogger()})
	cli.SetDefaultPolicy(msgr.LossyClient())
	replies := make(chan *msg.Message, 1)
	cli.AddDispatcherTail(msgr.DispatcherFunc(func(m *msg.Message) bool {
		replies <- m
		return true
	}))
	_ = cli.Start()
	defer cli.Shutdown()

	conn, _ := cli.Connect(srv.ListenAddrs()[0])
	req := msg.New(0x7001)
	req.Header.Tid = 1
	req.Data = msg.Buffers{[]byte("hello, "), []byte("ferry")}
	_ = conn.Send(req)

	select {
	case r := <-replies:
		fmt.Printf("tid %d from %s: %s\n", r.Header.Tid, r.Header.Src, r.Data.Bytes())
	case <-time.After(10 * time.Second):
		fmt.Println("no reply")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	fmt.Println("ready:", conn.Ready(ctx) == nil, "peer:", conn.PeerName())
	// Output:
	// tid 1 from osd.0: hello, ferry
	// ready: true peer: osd.0
}

// Policies are Ceph's presets, chosen per peer type.
func ExampleMessenger_SetPolicy() {
	m, _ := msgr.New(msgr.Config{Name: msg.EntityName{Type: msg.EntityOSD, Num: 3}, Logger: quietLogger()})
	m.SetDefaultPolicy(msgr.StatelessServer())           // clients
	m.SetPolicy(msg.EntityOSD, msgr.LosslessPeerReuse()) // other OSDs
	p := m.Policy(msg.EntityOSD)
	fmt.Println(p.Lossy, p.Standby, p.ResetCheck)
	// Output: false true true
}
