package rpc

// Test hooks of the direct bulk path (direct.go), for the external tests.

// DirectAnySize lets every non-empty transfer take the direct path, not
// only those above the eager limit, until the returned function runs.
func DirectAnySize() (undo func()) {
	directHooks.anySize.Store(true)
	return func() { directHooks.anySize.Store(false) }
}

// DirectFail makes each direct system call run f first and return its
// error instead of moving bytes when it is not nil (f may block), until
// the returned function runs.
func DirectFail(f func() error) (undo func()) {
	directHooks.fail.Store(&f)
	return func() { directHooks.fail.Store(nil) }
}

// DirectCalls returns the number of direct system calls made so far.
func DirectCalls() int64 { return directHooks.calls.Load() }

// DirectLeases returns the number of ranges this process's peers hold
// for direct access, over all connections.
func DirectLeases() int { return int(charged[chLeases].Load()) }

// DirectMute makes holders ignore requests for direct access (a holder
// that never answers), until the returned function runs.
func DirectMute() (undo func()) {
	directHooks.mute.Store(true)
	return func() { directHooks.mute.Store(false) }
}

// DirectWaiting returns the number of transfers this process's contexts
// have waiting for a holder's addresses, over all connections.
func DirectWaiting() int { return int(charged[chDirectWaits].Load()) }
