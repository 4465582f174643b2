package msgr1

import (
	"github.com/ferrymsg/ferry/msg"
)

// MessageFrame encodes one message for the wire: TAG_MSG, the header,
// front, middle, data and the footer. It comes in two parts, AppendHead
// (tag, header, front, middle) and AppendTail (the footer, with the data
// CRC and the signature), so that a writer can hand the data to writev
// without copying it. Engine.Frame fills one in for a connection.
//
// Call AppendHead, then AppendTail, without changing the fields in
// between (or Append for both). A MessageFrame is not safe for concurrent
// use.
type MessageFrame struct {
	// Header's Seq, Tid, Type, Priority, Version, DataOff, Src and
	// CompatVersion are sent; the lengths and the CRC are computed.
	Header              Header
	Front, Middle, Data msg.Buffers
	// Features is the connection's negotiated mask (it picks the footer's
	// form and the signature's algorithm).
	Features uint64
	// SignKey, if set, is the cephx session key the footer is signed
	// with (Engine.Frame sets the engine's signer instead).
	SignKey []byte

	signer *signer
	footer Footer
}

// WireLen returns the number of bytes the message takes on the wire.
func (f *MessageFrame) WireLen() int {
	return 1 + HeaderLen + f.Front.Len() + f.Middle.Len() + f.Data.Len() + FooterSize(f.Features)
}

// AppendHead appends the tag, the header, the front and the middle.
func (f *MessageFrame) AppendHead(b []byte) []byte {
	f.Header.FrontLen = uint32(f.Front.Len())
	f.Header.MiddleLen = uint32(f.Middle.Len())
	f.Header.DataLen = uint32(f.Data.Len())
	b = append(b, byte(TagMsg))
	b, f.Header.CRC = f.Header.Append(b)
	for _, p := range f.Front {
		b = append(b, p...)
	}
	for _, p := range f.Middle {
		b = append(b, p...)
	}
	f.footer = Footer{FrontCRC: f.Front.CRC(0), MiddleCRC: f.Middle.CRC(0), Flags: msg.FooterComplete}
	return b
}

// AppendTail appends the footer: the data's CRC and, with SignKey, the
// signature.
func (f *MessageFrame) AppendTail(b []byte) []byte {
	f.footer.DataCRC = f.Data.CRC(0)
	sg := f.signer
	if sg == nil && f.SignKey != nil {
		sg, _ = newSigner(f.SignKey)
	}
	if sg != nil {
		f.footer.Sig = sg.sign(sigBlock(&f.Header, &f.footer), f.Features&FeatureCephxV2 != 0)
		f.footer.Flags |= msg.FooterSigned
	}
	return AppendFooter(b, &f.footer, f.Features)
}

// Footer returns the footer AppendTail computed.
func (f *MessageFrame) Footer() Footer { return f.footer }

// Append appends the whole message.
func (f *MessageFrame) Append(b []byte) []byte {
	b = f.AppendHead(b)
	for _, p := range f.Data {
		b = append(b, p...)
	}
	return f.AppendTail(b)
}
