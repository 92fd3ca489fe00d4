package identity

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
)

var trustedNets = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:1::/48")}

func clientAddrOf(peer string, fields map[string][]string) netip.Addr {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = peer
	for k, vs := range fields {
		r.Header[k] = vs
	}
	return ClientAddr(r, trustedNets)
}

func TestClientAddr(t *testing.T) {
	for _, tc := range []struct {
		name   string
		peer   string
		fields map[string][]string
		want   string
	}{
		{"untrusted peer: its field ignored", "192.0.2.1:5000", map[string][]string{"X-Forwarded-For": {"198.51.100.7"}}, "192.0.2.1"},
		{"trusted peer, one hop", "10.0.0.2:5000", map[string][]string{"X-Forwarded-For": {"198.51.100.7"}}, "198.51.100.7"},
		{"the right-most untrusted hop, not a forged left one", "10.0.0.2:5000", map[string][]string{"X-Forwarded-For": {"203.0.113.9, 198.51.100.7, 10.1.1.1"}}, "198.51.100.7"},
		{"hops over several lines", "10.0.0.2:5000", map[string][]string{"X-Forwarded-For": {"203.0.113.9", "198.51.100.7"}}, "198.51.100.7"},
		{"an unreadable hop ends the walk", "10.0.0.2:5000", map[string][]string{"X-Forwarded-For": {"198.51.100.7, junk, 10.1.1.1"}}, "10.1.1.1"},
		{"all hops trusted: the left-most", "10.0.0.2:5000", map[string][]string{"X-Forwarded-For": {"10.3.3.3, 10.1.1.1"}}, "10.3.3.3"},
		{"Forwarded for= with port and brackets", "10.0.0.2:5000", map[string][]string{"Forwarded": {`for="[2001:db8::7]:443";proto=https, for=10.1.1.1`}}, "2001:db8::7"},
		{"X-Forwarded-For wins over Forwarded", "10.0.0.2:5000", map[string][]string{"X-Forwarded-For": {"198.51.100.7"}, "Forwarded": {"for=203.0.113.9"}}, "198.51.100.7"},
		{"mapped IPv4 unmapped", "[::ffff:10.0.0.2]:5000", map[string][]string{"X-Forwarded-For": {"::ffff:198.51.100.7"}}, "198.51.100.7"},
		{"IPv6 trusted peer", "[2001:db8:1::5]:443", map[string][]string{"X-Forwarded-For": {"2001:db8:2::9"}}, "2001:db8:2::9"},
	} {
		if got := clientAddrOf(tc.peer, tc.fields); got.String() != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, got, tc.want)
		}
	}
}

// FuzzClientAddr: whatever a client sends in X-Forwarded-For or Forwarded, the address
// believed is the peer or one of the hops, an untrusted peer is always itself, and
// hops a client adds to the left of an untrusted hop our proxy appended change nothing.
func FuzzClientAddr(f *testing.F) {
	for _, s := range []string{"198.51.100.7", "203.0.113.9, 10.1.1.1", "[2001:db8::7]:443", "junk,,", "10.0.0.1, ::ffff:1.2.3.4", "fe80::1%eth0", `for="[::1]:1";by=x`} {
		f.Add(s, "10.0.0.2:5000")
		f.Add(s, "192.0.2.1:80")
	}
	f.Fuzz(func(t *testing.T, forged, peer string) {
		got := clientAddrOf(peer, map[string][]string{"X-Forwarded-For": {forged}})
		p := PeerAddr(httptestRequest(peer))
		if !Contains(trustedNets, p) && got != p {
			t.Fatalf("untrusted peer %q: believed %v", peer, got)
		}
		if got != p {
			found := false
			for _, h := range forwardedHops(map[string][]string{"X-Forwarded-For": {forged}}) {
				if a, ok := parseHop(h); ok && a == got {
					found = true
				}
			}
			if !found {
				t.Fatalf("believed %v, neither the peer %v nor a hop of %q", got, p, forged)
			}
		}
		// Our proxy (trusted) appended the real client's address: nothing to its left counts.
		const real = "198.51.100.99"
		if got := clientAddrOf("10.0.0.2:5000", map[string][]string{"X-Forwarded-For": {forged + ", " + real}}); got.String() != real {
			t.Fatalf("forged %q to the left of %s: believed %v", forged, real, got)
		}
		if got := clientAddrOf("10.0.0.2:5000", map[string][]string{"X-Forwarded-For": {forged, real}}); got.String() != real {
			t.Fatalf("forged line %q above %s: believed %v", forged, real, got)
		}
	})
}

func httptestRequest(peer string) *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = peer
	return r
}
