//go:build !linux

package h2guard

import "net"

// limitUnsent does nothing where TCP_NOTSENT_LOWAT is not known.
func limitUnsent(net.Conn) {}
