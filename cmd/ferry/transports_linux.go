package main

import (
	"github.com/ferrymsg/ferry/transport"
	"github.com/ferrymsg/ferry/transport/shm"
)

// addPlatformTransports adds the Linux-only transports: shm.
func addPlatformTransports(r *transport.Registry) {
	_ = r.Register(shm.New())
}

// defaultBenchTransports is ferry bench's default --transports.
const defaultBenchTransports = "tcp,unix,shm"
