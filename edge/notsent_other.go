//go:build !linux

package edge

import "net"

// limitUnsent does nothing where TCP_NOTSENT_LOWAT is not known.
func limitUnsent(net.Conn) {}
