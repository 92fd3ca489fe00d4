//go:build !linux

package quicconn

import (
	"net"

	"golang.org/x/net/bpf"
)

// attachFilter does nothing outside Linux: the user-space filter drops banned sources.
func attachFilter(*net.UDPConn, []bpf.RawInstruction) error { return nil }

func socketDrops(*net.UDPConn) uint64 { return 0 }
