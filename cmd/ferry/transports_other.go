//go:build !linux

package main

import "github.com/ferrymsg/ferry/transport"

// addPlatformTransports adds nothing: shm is Linux-only, and an shm://
// address fails with transport.ErrUnknownScheme here.
func addPlatformTransports(*transport.Registry) {}

// defaultBenchTransports is ferry bench's default --transports.
const defaultBenchTransports = "tcp,unix"
