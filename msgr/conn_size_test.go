package msgr

import (
	"testing"
	"unsafe"
)

// TestConnSizeClass: every connection, idle ones included, holds a Conn,
// allocated in the 1024-byte size class (BenchmarkIdleConnections counts
// it against 12 KiB a connection). A field that takes it past 1024 bytes
// costs each connection 128 more (the 1152 class); move rarely used
// state behind a pointer instead.
func TestConnSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(Conn{}); n > 1024 {
		t.Fatalf("Conn is %d bytes, over the 1024-byte size class", n)
	}
}
