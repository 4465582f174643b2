package msgr

import (
	"encoding/binary"

	"github.com/ferrymsg/ferry/msg"
)

// Data CRCs folded into the copy (transport.CRCWriter, shm).
//
// On a connection that copies what it writes into memory shared with
// its peer, reading a large data segment once for its CRC and again for
// the copy costs a pass over the data. encode then leaves such a
// message's data CRC out of its epilogue (a crcFix with fused set) and
// writeFused writes the data through CRCWriter.WriteCRC, which
// checksums it in the copy, and patches the CRC in before the epilogue
// is written.

// fusedCRC reports whether a message's data is written with its CRC
// folded into the copy: it is large enough for that to pay, and from its
// first buffer k on each buffer is an iov piece of its own (encode copies
// smaller ones into its write buffer, so only those before k may be
// small: their CRC is computed ahead).
func fusedCRC(data msg.Buffers) (k int, ok bool) {
	if data.Len() < crcAheadMin {
		return 0, false
	}
	for k < len(data) && len(data[k]) < copyMax {
		k++
	}
	if k == len(data) {
		return 0, false
	}
	for _, p := range data[k:] {
		if len(p) < copyMax {
			return 0, false
		}
	}
	return k, true
}

// writeFused is writeOut on a transport.CRCWriter for a batch with fused
// data CRCs: the pieces between them go out as writeOut would write
// them, a fused message's data through WriteCRC, and once its last byte
// is written its CRC goes into the epilogue, which follows. Non-blocking,
// it returns done=false with the progress in w when the connection takes
// no more without waiting.
func (w *writeState) writeFused(r *socketRun, blocking bool) (done bool, err error) {
	for w.pos < len(w.iov) {
		var f *crcFix
		if w.fi < len(w.fix) {
			f = &w.fix[w.fi]
		}
		if f != nil && w.pos >= f.first {
			// A fused message's data piece.
			if w.pos == f.first && w.skip == 0 {
				f.crc = f.crc0
			}
			b := w.iov[w.pos][w.skip:]
			// The segment CRC is ceph_crc32c: crc32.Update's without
			// its inversions.
			n, crc, err := r.cw.WriteCRC(b, ^f.crc, !blocking)
			f.crc = ^crc
			w.advance(n)
			if err != nil {
				return false, err
			}
			if n < len(b) {
				if !blocking {
					return false, nil
				}
				continue
			}
			if w.pos > f.after {
				binary.LittleEndian.PutUint32(w.iov[f.piece][f.off:], f.crc)
				w.fi++
			}
			continue
		}
		end := len(w.iov)
		if f != nil {
			end = f.first
		}
		wv := w.iov[w.pos:end:end]
		if w.skip > 0 {
			wv[0] = wv[0][w.skip:]
			w.skip = 0
		}
		if blocking {
			n, err := wv.WriteTo(r.nc)
			w.pos = end
			if err != nil {
				return false, err
			}
			_ = n
			continue
		}
		n, err := r.tw.TryWriteBuffers(wv)
		w.advance(n)
		if err != nil {
			return false, err
		}
		if w.pos < end {
			return false, nil
		}
	}
	return true, nil
}
