package bench

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// maxSources bounds a -sources list: more addresses than this is a typo, not a plan.
const maxSources = 1 << 16

// ErrSources reports a malformed source address list.
var ErrSources = errors.New("bench: bad source addresses")

// ParseSources parses a list of local source addresses: comma-separated items, each a
// single address ("127.0.0.2") or an inclusive IPv4 range ("127.0.0.2-127.0.0.200").
// Addresses keep their order; duplicates are kept as given. At most 65536 addresses.
func ParseSources(s string) ([]netip.Addr, error) {
	var out []netip.Addr
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, fmt.Errorf("%w: empty item in %q", ErrSources, s)
		}
		lo, hi, isRange := strings.Cut(item, "-")
		first, err := netip.ParseAddr(strings.TrimSpace(lo))
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrSources, err)
		}
		if !isRange {
			out = append(out, first.Unmap())
		} else {
			last, err := netip.ParseAddr(strings.TrimSpace(hi))
			if err != nil {
				return nil, fmt.Errorf("%w: %v", ErrSources, err)
			}
			first, last = first.Unmap(), last.Unmap()
			if !first.Is4() || !last.Is4() {
				return nil, fmt.Errorf("%w: range %q: only IPv4 ranges are supported", ErrSources, item)
			}
			if last.Less(first) {
				return nil, fmt.Errorf("%w: range %q runs backwards", ErrSources, item)
			}
			for a := first; ; a = a.Next() {
				out = append(out, a)
				if a == last || len(out) > maxSources {
					break
				}
			}
		}
		if len(out) > maxSources {
			return nil, fmt.Errorf("%w: more than %d addresses", ErrSources, maxSources)
		}
	}
	return out, nil
}
