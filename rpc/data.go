package rpc

import (
	"bytes"
	"encoding"
	"fmt"

	"github.com/ferrymsg/ferry/msg"
)

// Input is what a request carries, or a reply: its encoding is appended
// to the RPC header in the message's front segment. An Input that is
// also a DataAppender sends buffers in the data segment without copying
// them. A nil Input sends nothing.
type Input = encoding.BinaryAppender

// Output receives a reply's output (or, at the target, a request's
// input): UnmarshalBinary gets the encoded part (and must copy what it
// keeps, as the encoding package requires); a DataReceiver also gets the
// data segment. A nil Output ignores the reply's payload.
type Output = encoding.BinaryUnmarshaler

// DataAppender is implemented by inputs and outputs that carry raw
// buffers besides their encoded part. The buffers go out in the
// message's data segment as they are: they are not copied, so they must
// not change until the request completes (for an input) or until the
// connection has written them (for a reply: treat them as immutable).
type DataAppender interface {
	// AppendData appends the raw buffers to bufs and returns the result.
	AppendData(bufs [][]byte) [][]byte
}

// DataReceiver is implemented by outputs that take the data segment. The
// buffers are not copied and belong to the receiver afterwards.
type DataReceiver interface {
	// ReceiveData takes the data segment (nil when empty).
	ReceiveData(data [][]byte) error
}

// DataPeeker is implemented by an Output that looks at the data segment in
// ReceiveData without keeping it: the RPC layer then recycles the
// message's buffers as soon as decoding returns (a reply), or once the
// request is answered (a handler's input, Incoming.Decode), so a large
// payload that is only checked or copied elsewhere costs no allocation.
type DataPeeker interface {
	DataReceiver
	PeeksData()
}

// Bytes is a raw payload. As an Input it travels in the data segment
// without being copied; as an Output (*Bytes) it takes the data segment
// without copying when it is one buffer (the usual case), so a 1 MiB
// input costs no copy on either side. Pass *Bytes rather than Bytes as an
// Input to avoid boxing the slice header.
type Bytes []byte

// AppendBinary appends nothing: the bytes go in the data segment.
func (b Bytes) AppendBinary(dst []byte) ([]byte, error) { return dst, nil }

// AppendData appends b.
func (b Bytes) AppendData(bufs [][]byte) [][]byte {
	if len(b) == 0 {
		return bufs
	}
	return append(bufs, b)
}

// UnmarshalBinary copies a front-segment payload (a peer that does not
// use the data segment); an empty one leaves b for ReceiveData.
func (b *Bytes) UnmarshalBinary(data []byte) error {
	if len(data) > 0 {
		*b = bytes.Clone(data)
	} else {
		*b = nil
	}
	return nil
}

// ReceiveData takes the data segment: one buffer as it is, several
// joined.
func (b *Bytes) ReceiveData(data [][]byte) error {
	switch len(data) {
	case 0:
	case 1:
		*b = data[0]
	default:
		*b = msg.Buffers(data).Bytes()
	}
	return nil
}

// CopyBytes is a raw payload like Bytes, for callers and handlers that
// receive large payloads again and again into memory of their own: as an
// Output (*CopyBytes) it copies the data segment into its own capacity,
// allocating only when that is too small, and keeps none of the received
// buffers (a DataPeeker), so they go back to the pools at once. A
// CopyBytes reused across calls then costs one copy per call where Bytes
// costs a fresh buffer: on a small VM, faulting in and zeroing a fresh
// 1 MiB costs more than copying it. As an Input it is Bytes.
type CopyBytes []byte

// AppendBinary appends nothing: the bytes go in the data segment.
func (b CopyBytes) AppendBinary(dst []byte) ([]byte, error) { return dst, nil }

// AppendData appends b.
func (b CopyBytes) AppendData(bufs [][]byte) [][]byte { return Bytes(b).AppendData(bufs) }

// UnmarshalBinary copies a front-segment payload (a peer that does not
// use the data segment) into b's capacity; an empty one empties b for
// ReceiveData.
func (b *CopyBytes) UnmarshalBinary(data []byte) error {
	*b = append((*b)[:0], data...)
	return nil
}

// ReceiveData copies the data segment into b's capacity (b's length
// becomes the segment's). An empty segment leaves what UnmarshalBinary
// set.
func (b *CopyBytes) ReceiveData(data [][]byte) error {
	n := msg.Buffers(data).Len()
	if n == 0 {
		return nil
	}
	if cap(*b) < n {
		*b = make([]byte, n)
	}
	*b = (*b)[:n]
	off := 0
	for _, p := range data {
		off += copy((*b)[off:], p)
	}
	return nil
}

// PeeksData marks CopyBytes as keeping none of the received buffers
// (DataPeeker).
func (b *CopyBytes) PeeksData() {}

// encodeInput appends in's encoding to front and its data buffers to
// data.
func encodeInput(in Input, front []byte, data [][]byte) ([]byte, [][]byte, error) {
	if in == nil {
		return front, data, nil
	}
	var err error
	if front, err = in.AppendBinary(front); err != nil {
		return front, data, err
	}
	if da, ok := in.(DataAppender); ok {
		data = da.AppendData(data)
	}
	return front, data, nil
}

// decodeOutput gives body and data to out, recovering a panic in its
// methods as a malformed payload.
func decodeOutput(out Output, body []byte, data msg.Buffers) (err error) {
	if out == nil {
		return nil
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("decoder panicked: %v", p)
		}
	}()
	if err := out.UnmarshalBinary(body); err != nil {
		return err
	}
	if dr, ok := out.(DataReceiver); ok {
		var d [][]byte
		if len(data) > 0 {
			d = data
		}
		return dr.ReceiveData(d)
	}
	if len(data) > 0 {
		return fmt.Errorf("%d bytes of data segment for an output that takes none", data.Len())
	}
	return nil
}
