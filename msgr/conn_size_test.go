package msgr

import (
	"testing"
	"unsafe"
)

// TestConnSizeClass: every connection, idle ones included, holds a Conn,
// allocated in the 896-byte size class (BenchmarkIdleConnections counts
// it against 12 KiB a connection). A field that takes it past 896 bytes
// costs each connection 128 more (the 1024 class); move rarely used
// state behind a pointer instead, or into padding.
func TestConnSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(Conn{}); n > 896 {
		t.Fatalf("Conn is %d bytes, over the 896-byte size class", n)
	}
}
