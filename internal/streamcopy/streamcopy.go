// Package streamcopy copies large buffers with non-temporal stores: the
// destination's cache lines are written to memory without first being
// read into the writer's cache.
//
// A shared-memory ring is the case it is for. The writer's next pass over
// a ring writes lines the reader's core has just read, and an ordinary
// store into such a line first waits for the other core to give it up: on
// the development machine (2 vCPUs) writing 1 MiB so took 146-192 µs,
// against 26-28 µs streamed past the cache. The reader then reads memory
// rather than the writer's cache, which costs it less than that wait.
//
// Copy streams only the 64-byte-aligned middle of the destination, and
// only on amd64; elsewhere, and for short buffers, it is copy. Its stores
// are fenced (SFENCE) before it returns, so a release store of an index
// after Copy publishes the bytes as it would after copy.
package streamcopy

// Min is the length below which Copy is an ordinary copy: a short
// message is read while still in the writer's cache, which streaming
// would forgo.
const Min = 4096

// Copy copies min(len(dst), len(src)) bytes from src to dst, as copy
// does, and returns that count. dst and src must not overlap.
func Copy(dst, src []byte) int {
	n := min(len(dst), len(src))
	if !useStream || n < Min {
		return copy(dst, src[:n])
	}
	a := align(dst)
	copy(dst[:a], src[:a])
	m := (n - a) &^ 255
	stream(dst[a:a+m], src[a:a+m])
	copy(dst[a+m:n], src[a+m:n])
	return n
}
