//go:build !unix

package transport

// lockDir is a no-op where there is no flock: the stale-socket check is
// not atomic there.
func lockDir(string) func() { return func() {} }
