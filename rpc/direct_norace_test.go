//go:build !race

package rpc_test

// raceBuild: see direct_race_test.go.
const raceBuild = false
