//go:build !amd64 || !gc || purego

package crc32c

const useFold = false

func fold(seed uint32, p []byte) uint32 { panic("crc32c: no folding on this architecture") }

func foldCopy(seed uint32, dst, src []byte) uint32 {
	panic("crc32c: no folding on this architecture")
}

func foldCopyStream(seed uint32, dst, src []byte) uint32 {
	panic("crc32c: no folding on this architecture")
}
