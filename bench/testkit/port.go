package testkit

import (
	"errors"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
)

// handedOut holds the ports FreePort returned: two servers of one test or scenario (a
// server's public and admin ports, a Redis Cluster node's port and bus) must not be
// given the same one.
var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// FreePort returns a port free on 127.0.0.1 for both TCP and UDP at the time of the
// call and not returned before by this process, for a server a test or a scenario
// starts. It is drawn below Linux's ephemeral range (32768–60999), so no outgoing
// connection can take it before the server binds it, or while the server is stopped;
// another server started meanwhile still could.
func FreePort() (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = make(map[int]bool)
	}
	for range 200 {
		port := 10000 + rand.IntN(22768)
		if !handedOut.ports[port] && freeTCPUDP(port) {
			handedOut.ports[port] = true
			return port, nil
		}
	}
	return 0, errors.New("testkit: no port free for both TCP and UDP")
}

// Port is FreePort for a test: it fails the test when no port is free.
func Port(t T) int {
	t.Helper()
	p, err := FreePort()
	if err != nil {
		t.Fatalf("%v", err)
	}
	return p
}

// freeTCPUDP reports whether port can be bound on 127.0.0.1 for TCP and for UDP.
func freeTCPUDP(port int) bool {
	tl, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	defer tl.Close()
	ul, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	if err != nil {
		return false
	}
	ul.Close()
	return true
}
