//go:build race

package rpc_test

// raceBuild: the race detector slows byte loops about tenfold, so the
// direct-path tests move smaller buffers.
const raceBuild = true
