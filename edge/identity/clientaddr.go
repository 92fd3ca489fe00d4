package identity

import (
	"net/http"
	"net/netip"
	"strings"
)

// PeerAddr is the address of the connection's peer.
func PeerAddr(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// ClientAddr is the address the request comes from: the peer, or — only when the peer is
// a trusted proxy — the right-most untrusted address of X-Forwarded-For (or, without it,
// Forwarded). Walking from the right means a client cannot pick its own address by
// sending a forged header: only hops our proxies appended are believed.
func ClientAddr(r *http.Request, trusted []netip.Prefix) netip.Addr {
	peer := PeerAddr(r)
	if len(trusted) == 0 || !Contains(trusted, peer) {
		return peer
	}
	hops := forwardedHops(r.Header)
	addr := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := parseHop(hops[i])
		if !ok {
			// A hop we cannot read ends what we can believe: the last trusted hop is the
			// best we know.
			return addr
		}
		addr = a
		if !Contains(trusted, a) {
			return a
		}
	}
	return addr
}

// forwardedHops lists the addresses a request passed through, client first, from
// X-Forwarded-For or else the for= parameters of Forwarded (RFC 7239).
func forwardedHops(h http.Header) []string {
	var hops []string
	if xff := h.Values("X-Forwarded-For"); len(xff) > 0 {
		for _, line := range xff {
			for part := range strings.SplitSeq(line, ",") {
				hops = append(hops, strings.TrimSpace(part))
			}
		}
		return hops
	}
	for _, line := range h.Values("Forwarded") {
		for elem := range strings.SplitSeq(line, ",") {
			for pair := range strings.SplitSeq(elem, ";") {
				k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
				if ok && strings.EqualFold(k, "for") {
					hops = append(hops, strings.Trim(v, `"`))
				}
			}
		}
	}
	return hops
}

// parseHop reads one hop: "192.0.2.1", "2001:db8::1", "[2001:db8::1]:443", "192.0.2.1:80".
func parseHop(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return a.Unmap(), true
		}
	}
	return netip.Addr{}, false
}

// Contains reports whether a is in one of ps.
func Contains(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
