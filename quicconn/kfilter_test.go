package quicconn

import (
	"net"
	"net/netip"
	"runtime"
	"slices"
	"testing"
	"time"

	"golang.org/x/net/ipv4"
)

func TestKernelPrefixes(t *testing.T) {
	in := []netip.Prefix{
		netip.MustParsePrefix("10.1.2.3/24"),          // masked
		netip.MustParsePrefix("10.1.2.7/32"),          // inside 10.1.2.0/24
		netip.MustParsePrefix("::ffff:192.0.2.9/128"), // IPv4-mapped
		netip.MustParsePrefix("2001:db8::1/48"),
		netip.MustParsePrefix("2001:db8::/48"), // duplicate once masked
		{},
	}
	v4, v6 := kernelPrefixes(in)
	want4 := []netip.Prefix{netip.MustParsePrefix("10.1.2.0/24"), netip.MustParsePrefix("192.0.2.9/32")}
	want6 := []netip.Prefix{netip.MustParsePrefix("2001:db8::/48")}
	if !slices.Equal(v4, want4) || !slices.Equal(v6, want6) {
		t.Errorf("kernelPrefixes = %v %v, want %v %v", v4, v6, want4, want6)
	}

	// The bound: the broadest prefixes are kept, and the program fits the kernel's limit.
	var many []netip.Prefix
	for i := range 2000 {
		many = append(many, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 1}), 32))
		many = append(many, netip.PrefixFrom(netip.AddrFrom16([16]byte{0x20, 1, 0xd, 0xb8, byte(i >> 8), byte(i), 1}), 127))
	}
	many = append(many, netip.MustParsePrefix("172.16.0.0/12"))
	v4, v6 = kernelPrefixes(many)
	if len(v4) != MaxKernelIPv4 || len(v6) != MaxKernelIPv6 || v4[0] != netip.MustParsePrefix("172.16.0.0/12") {
		t.Errorf("kept %d IPv4 (first %v), %d IPv6", len(v4), v4[0], len(v6))
	}
	prog, err := compileKernelFilter(many)
	if err != nil || len(prog) > 4096 {
		t.Fatalf("compile: %d instructions, %v", len(prog), err)
	}
	if prog, err := compileKernelFilter(nil); prog != nil || err != nil {
		t.Errorf("empty list: %v, %v; want no program", prog, err)
	}
}

// kernelReader is a Guard's Socket with no user-space ban, so only the kernel filter
// can drop.
func kernelReader(t *testing.T, network, listen string) (*Guard, *Socket) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the kernel filter is Linux only")
	}
	g, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	ua, err := net.ResolveUDPAddr(network, listen)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.ListenUDP(network, ua)
	if err != nil {
		t.Skipf("listen %s: %v", listen, err)
	}
	t.Cleanup(func() { c.Close() })
	return g, g.WrapConn(c)
}

// sendFrom sends n datagrams to dst from a socket bound to src, each payload the source.
func sendFrom(t *testing.T, network, src string, dst net.Addr, n int) {
	t.Helper()
	c, err := net.ListenUDP(network, &net.UDPAddr{IP: net.ParseIP(src)})
	if err != nil {
		t.Skipf("bind %s: %v", src, err)
	}
	defer c.Close()
	for range n {
		if _, err := c.WriteTo([]byte(src), dst); err != nil {
			t.Fatal(err)
		}
	}
}

// received reads everything s has queued (until 200 ms of silence), through ReadBatch
// or ReadFrom, and counts datagrams by source.
func received(t *testing.T, s *Socket, batch bool) map[string]int {
	t.Helper()
	got := map[string]int{}
	for {
		s.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if batch {
			ms := make([]ipv4.Message, 8)
			for i := range ms {
				ms[i].Buffers = [][]byte{make([]byte, 1500)}
			}
			n, err := s.ReadBatch(ms, 0)
			if err != nil {
				return got
			}
			for _, m := range ms[:n] {
				a, _ := addrOf(m.Addr)
				got[a.Unmap().String()]++
			}
			continue
		}
		b := make([]byte, 1500)
		_, addr, err := s.ReadFrom(b)
		if err != nil {
			return got
		}
		a, _ := addrOf(addr)
		got[a.Unmap().String()]++
	}
}

func TestKernelFilterIPv4(t *testing.T) {
	g, s := kernelReader(t, "udp4", "127.0.0.1:0")
	dst := s.LocalAddr()
	p := netip.MustParsePrefix
	srcs := []string{"127.0.0.5", "127.0.0.6", "127.0.1.5", "127.0.1.9"}
	for _, tc := range []struct {
		name    string
		set     func() error
		batch   bool
		dropped []string
	}{
		{"socket 127.0.0.5/32, ReadBatch", func() error { return s.SetKernelFilter([]netip.Prefix{p("127.0.0.5/32")}) }, true, []string{"127.0.0.5"}},
		{"guard 127.0.0.5/32, ReadFrom", func() error { return g.SetKernelBans([]netip.Prefix{p("127.0.0.5/32")}) }, false, []string{"127.0.0.5"}},
		{"guard 127.0.1.0/24 and a mapped /32", func() error {
			return g.SetKernelBans([]netip.Prefix{p("127.0.1.0/24"), p("::ffff:127.0.0.5/128")})
		}, true, []string{"127.0.0.5", "127.0.1.5", "127.0.1.9"}},
		{"cleared", func() error { return g.SetKernelBans(nil) }, true, nil},
		{"cleared again, ReadFrom", func() error { return g.SetKernelBans([]netip.Prefix{}) }, false, nil},
	} {
		if err := tc.set(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		before := g.Stats().DroppedKernel
		for _, src := range srcs {
			sendFrom(t, "udp4", src, dst, 3)
		}
		got := received(t, s, tc.batch)
		for _, src := range srcs {
			want := 3
			if slices.Contains(tc.dropped, src) {
				want = 0
			}
			if got[src] != want {
				t.Errorf("%s: received %d from %s, want %d (all: %v)", tc.name, got[src], src, want, got)
			}
		}
		if d := g.Stats().DroppedKernel - before; d != uint64(3*len(tc.dropped)) {
			t.Errorf("%s: DroppedKernel rose by %d, want %d", tc.name, d, 3*len(tc.dropped))
		}
	}
	if st := g.Stats(); st.DroppedBanned != 0 {
		t.Errorf("DroppedBanned = %d: user space saw banned datagrams", st.DroppedBanned)
	}
}

// TestKernelFilterDualStack covers IPv4 sources on a dual-stack socket (IPv4 network
// header) and IPv6 sources.
func TestKernelFilterDualStack(t *testing.T) {
	g, s := kernelReader(t, "udp", "[::]:0")
	port := s.LocalAddr().(*net.UDPAddr).Port
	if err := g.SetKernelBans([]netip.Prefix{netip.MustParsePrefix("127.0.0.5/32"), netip.MustParsePrefix("::1/128")}); err != nil {
		t.Fatal(err)
	}
	sendFrom(t, "udp4", "127.0.0.5", &net.UDPAddr{IP: net.ParseIP("127.0.0.1"), Port: port}, 3)
	sendFrom(t, "udp4", "127.0.0.6", &net.UDPAddr{IP: net.ParseIP("127.0.0.1"), Port: port}, 3)
	sendFrom(t, "udp6", "::1", &net.UDPAddr{IP: net.IPv6loopback, Port: port}, 3)
	got := received(t, s, true)
	if got["127.0.0.5"] != 0 || got["127.0.0.6"] != 3 || got["::1"] != 0 {
		t.Errorf("received %v, want only 3 from 127.0.0.6", got)
	}
	if err := g.SetKernelBans([]netip.Prefix{netip.MustParsePrefix("::/1")}); err != nil { // not ::1's half
		t.Fatal(err)
	}
	sendFrom(t, "udp6", "::1", &net.UDPAddr{IP: net.IPv6loopback, Port: port}, 3)
	sendFrom(t, "udp4", "127.0.0.5", &net.UDPAddr{IP: net.ParseIP("127.0.0.1"), Port: port}, 3)
	if got := received(t, s, false); got["::1"] != 0 || got["127.0.0.5"] != 3 {
		t.Errorf("::/1 banned: received %v, want only 3 from 127.0.0.5", got)
	}
	if err := g.SetKernelBans([]netip.Prefix{netip.MustParsePrefix("8000::/1"), netip.MustParsePrefix("::2/127")}); err != nil {
		t.Fatal(err)
	}
	sendFrom(t, "udp6", "::1", &net.UDPAddr{IP: net.IPv6loopback, Port: port}, 3)
	if got := received(t, s, false); got["::1"] != 3 {
		t.Errorf("::1 not banned: received %v, want 3 from ::1", got)
	}
}

// TestKernelFilterQUIC: a real handshake through the filtered socket from an unbanned
// source; the banned source's Initials never reach user space; a later Socket of the
// Guard gets the filter in force; and closed sockets are forgotten.
func TestKernelFilterQUIC(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the kernel filter is Linux only")
	}
	srv := startServer(t, Config{}, serverOpts{}) // no user-space ban
	if err := srv.g.SetKernelBans([]netip.Prefix{netip.MustParsePrefix("127.0.0.5/32")}); err != nil {
		t.Fatal(err)
	}
	a, b := newClient(t, "127.0.0.5"), newClient(t, "127.0.0.6")
	if _, err := a.dial(t, srv.addr, dialOpts{handshake: 300 * time.Millisecond}); err == nil {
		t.Fatal("banned source completed a handshake")
	}
	if seen := srv.admissions(a.addr); len(seen) != 0 {
		t.Errorf("ConnContext saw the banned source: %+v", seen)
	}
	if st := srv.g.Stats(); st.DroppedKernel == 0 || st.DroppedBanned != 0 {
		t.Errorf("DroppedKernel = %d, DroppedBanned = %d; want > 0, 0", st.DroppedKernel, st.DroppedBanned)
	}
	b.mustDial(t, srv.addr)

	// A Socket made later gets the filter in force.
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	s2 := srv.g.WrapConn(c)
	sendFrom(t, "udp4", "127.0.0.5", s2.LocalAddr(), 2)
	sendFrom(t, "udp4", "127.0.0.6", s2.LocalAddr(), 2)
	if got := received(t, s2, true); got["127.0.0.5"] != 0 || got["127.0.0.6"] != 2 {
		t.Errorf("later socket: received %v, want only 2 from 127.0.0.6", got)
	}
	c.Close()
	if err := srv.g.SetKernelBans(nil); err != nil {
		t.Fatalf("with a closed socket: %v", err)
	}
	if n := len(srv.g.ksocks); n != 1 {
		t.Errorf("%d sockets registered after one closed, want 1", n)
	}
	a.mustDial(t, srv.addr)
}
