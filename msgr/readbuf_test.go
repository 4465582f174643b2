package msgr

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// TestGrowReadBufCarries: a reader that takes a large buffer in place of
// its small one reads on exactly where it was, the bytes the small one
// had buffered first, then the socket's.
func TestGrowReadBufCarries(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	want := make([]byte, 20000)
	for i := range want {
		want[i] = byte(i*7 + i/251)
	}
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Write(want[:6000])
		time.Sleep(50 * time.Millisecond)
		_, _ = c.Write(want[6000:])
	}()
	nc, err := net.Dial("tcp", "127.0.0.1:"+portOf(l.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	fr := &frameReader{r: &socketRun{nc: nc, src: nc}, br: getReadBuf(nc)}
	if fr.br.Size() != readBufSmall {
		t.Fatalf("a reader starts with %d bytes, want %d", fr.br.Size(), readBufSmall)
	}
	got := make([]byte, 0, len(want))
	head := make([]byte, 100)
	if _, err := io.ReadFull(fr.br, head); err != nil {
		t.Fatal(err)
	}
	got = append(got, head...)
	if _, err := fr.br.Peek(readBufSmall - 200); err != nil { // the small buffer holds what the next frames need
		t.Fatal(err)
	}
	buffered := fr.br.Buffered()
	fr.growReadBuf()
	if fr.br.Size() != readBufSize || fr.br.Buffered() != buffered {
		t.Fatalf("after growing: size %d holding %d, want %d holding %d", fr.br.Size(), fr.br.Buffered(), readBufSize, buffered)
	}
	rest, err := io.ReadAll(fr.br)
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, rest...)
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, not the %d sent (first difference at %d)", len(got), len(want), firstDiff(got, want))
	}
	putReadBuf(fr.br)
}

func portOf(a net.Addr) string {
	_, p, _ := net.SplitHostPort(a.String())
	return p
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
