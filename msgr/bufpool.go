package msgr

import (
	"github.com/ferrymsg/ferry/internal/bufpool"
	"github.com/ferrymsg/ferry/msg"
)

// Large received message bodies come from internal/bufpool and go back
// when the message is released (msg.Message.Done, which the messenger
// itself calls once it has sent a message).

// getBody returns a buffer of length n and, for a pooled one, the
// function that returns it.
func getBody(n int) ([]byte, func(*msg.Message)) {
	b, p := bufpool.Get(n)
	if p == nil {
		return b, nil
	}
	return b, func(m *msg.Message) {
		m.Front, m.Middle, m.Data = nil, nil, nil
		bufpool.Put(p)
	}
}
