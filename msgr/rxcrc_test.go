package msgr_test

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/msgr/msgr2"
	"github.com/ferrymsg/ferry/transport"
)

// TestReceivedDataCRC: a message with 64 KiB or more of data received in
// crc mode carries the data CRC the messenger checked
// (ReceivedDataCRC); a smaller one carries none. An echo that passes it
// on with SetDataCRCAhead sends data the peer accepts, and a wrong CRC
// passed so is caught by the peer. It runs over TCP with the system's
// congestion control and with cubic and bbr where the kernel has them:
// under cubic the reader folds the CRC into each read as the data lands,
// under bbr it raises the receive low-water mark first (lowat.read).
func TestReceivedDataCRC(t *testing.T) {
	avail, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	for _, cc := range []string{"", "cubic", "bbr"} {
		name := cc
		if name == "" {
			name = "system"
		}
		t.Run(name, func(t *testing.T) {
			if cc != "" && !slices.Contains(strings.Fields(string(avail)), cc) {
				t.Skipf("the kernel has no %s", cc)
			}
			testReceivedDataCRC(t, transport.NewRegistry(transport.NewTCP(transport.TCPOptions{Congestion: cc})))
		})
	}
}

func testReceivedDataCRC(t *testing.T, reg *transport.Registry) {
	s, err := msgr.New(msgr.Config{Name: msg.EntityName{Type: msg.EntityOSD}, Transports: reg, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	s.SetDefaultPolicy(msgr.StatelessServer())
	got := make(chan *msg.Message, 4)
	s.AddDispatcherTail(msgr.DispatcherFunc(func(m *msg.Message) bool {
		got <- m
		r := msg.New(m.Header.Type)
		r.Header.Tid = m.Header.Tid
		r.Data = m.Data
		if crc, ok := m.ReceivedDataCRC(); ok {
			if m.Header.Tid == 3 {
				crc++ // a wrong CRC: the client must refuse the reply
			}
			r.SetDataCRCAhead(crc)
		}
		_ = m.Conn.Send(r)
		return true
	}))
	if err := s.Bind("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)

	c, err := msgr.New(msgr.Config{Name: msg.EntityName{Type: msg.EntityClient}, Transports: reg, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	replies := make(chan *msg.Message, 4)
	c.AddDispatcherTail(msgr.DispatcherFunc(func(m *msg.Message) bool { replies <- m; return true }))
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	conn, err := c.Connect(s.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tid  uint64
		size int
		want bool // a CRC recorded on receipt
	}{{1, 1 << 20, true}, {2, 1000, false}, {4, 3<<20 + 5, true}, {3, 256 << 10, true}} {
		data := make([]byte, tc.size)
		for i := range data {
			data[i] = byte(i*31 + int(tc.tid))
		}
		m := msg.New(testType)
		m.Header.Tid = tc.tid
		m.Data = msg.Buffers{data}
		if err := conn.Send(m); err != nil {
			t.Fatal(err)
		}
		var rm *msg.Message
		select {
		case rm = <-got:
		case <-time.After(10 * time.Second):
			t.Fatalf("tid %d: not received", tc.tid)
		}
		crc, ok := rm.ReceivedDataCRC()
		if ok != tc.want || ok && crc != msgr2.SegmentCRC(msg.Buffers{data}) {
			t.Fatalf("tid %d (%d B): ReceivedDataCRC %#x, %v; want %#x, %v", tc.tid, tc.size, crc, ok, msgr2.SegmentCRC(msg.Buffers{data}), tc.want)
		}
		select {
		case r := <-replies:
			if tc.tid == 3 {
				t.Fatalf("tid 3: a reply with a wrong data CRC was delivered")
			}
			if r.Header.Tid != tc.tid || r.Data.Len() != tc.size {
				t.Fatalf("tid %d: reply tid %d, %d bytes", tc.tid, r.Header.Tid, r.Data.Len())
			}
		case <-time.After(time.Second):
			if tc.tid != 3 {
				t.Fatalf("tid %d: no reply", tc.tid)
			}
		}
	}
}
