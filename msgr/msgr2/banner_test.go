package msgr2

import (
	"errors"
	"testing"

	"github.com/ferrymsg/ferry/msg"
)

// TestMsgr1BannerRefusedAtOnce: a msgr1 peer sends its 9-byte banner
// "ceph v027" and waits for ours; the engine tells it from the first 8
// bytes, without waiting for a tenth that never comes.
func TestMsgr1BannerRefusedAtOnce(t *testing.T) {
	e := NewEngine(Config{Role: Server, MyName: msg.EntityName{Type: msg.EntityMon}})
	e.Start()
	if n, _ := e.Need(); n != 8 {
		t.Fatalf("the engine first asks for %d bytes, want 8 (a msgr1 banner is 9)", n)
	}
	_, err := e.Feed([]byte("ceph v02"))
	if !errors.Is(err, ErrMsgr1Banner) {
		t.Fatalf("a msgr1 banner: %v, want ErrMsgr1Banner", err)
	}
	e = NewEngine(Config{Role: Server})
	e.Start()
	if _, err := e.Feed([]byte("GET / HT")); !errors.Is(err, ErrBadBanner) {
		t.Errorf("an HTTP request: %v, want ErrBadBanner", err)
	}
}
