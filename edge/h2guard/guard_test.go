package h2guard

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"

	"golang.org/x/net/http2"
)

// TestFollow feeds a frame stream in reads of every size and checks when a header
// section is pending (the header timeout's deadline armed).
func TestFollow(t *testing.T) {
	frame := func(typ, flags byte, n int) []byte {
		return append([]byte{byte(n >> 16), byte(n >> 8), byte(n), typ, flags, 0, 0, 0, 1}, make([]byte, n)...)
	}
	var stream []byte
	var want []bool // pending once stream[:i+1] is read
	// add appends a frame: pending before its header is complete, within it, after it.
	add := func(b []byte, before, within, after bool) {
		stream = append(stream, b...)
		for j := range len(b) {
			switch {
			case j == len(b)-1:
				want = append(want, after)
			case j < frameHeaderLen-1:
				want = append(want, before)
			default:
				want = append(want, within)
			}
		}
	}
	add([]byte(http2.ClientPreface), false, false, false)
	add(frame(0x4, 0, 6), false, false, false)                          // SETTINGS
	add(frame(frameHeaders, flagEndHeaders, 5), false, true, false)     // one-frame section
	add(frame(0x0, 0, 4), false, false, false)                          // DATA
	add(frame(frameHeaders, 0, 3), false, true, true)                   // a section begins…
	add(frame(frameContinuation, 0, 0), true, true, true)               // …goes on (empty)…
	add(frame(frameContinuation, flagEndHeaders, 2), true, true, false) // …and ends
	add(frame(frameHeaders, flagEndHeaders, 0), false, false, false)    // an empty one-frame section
	for size := 1; size <= len(stream); size++ {
		g := &Conn{skip: prefaceLen}
		for i := 0; i < len(stream); i += size {
			end := min(i+size, len(stream))
			g.follow(stream[i:end])
			if g.pending != want[end-1] {
				t.Fatalf("reads of %d bytes: pending = %v after byte %d, want %v", size, g.pending, end, want[end-1])
			}
		}
	}
}

// BenchmarkH2GuardFollow: what the frame guard costs a legitimate connection per
// request (HEADERS with END_STREAM, a WINDOW_UPDATE, a DATA frame), abuse checks on.
func BenchmarkH2GuardFollow(b *testing.B) {
	frame := func(typ, flags byte, id uint32, payload []byte) []byte {
		n := len(payload)
		return append([]byte{byte(n >> 16), byte(n >> 8), byte(n), typ, flags, byte(id >> 24), byte(id >> 16), byte(id >> 8), byte(id)}, payload...)
	}
	buf := frame(frameHeaders, flagEndHeaders|flagEndStream, 1, make([]byte, 20))
	buf = append(buf, frame(frameWindowUpdate, 0, 0, []byte{0, 0, 0x40, 0})...)
	buf = append(buf, frame(frameData, 0, 0, make([]byte, 64))...)
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("abuse=%v", on), func(b *testing.B) {
			g := &Conn{}
			if on {
				g.abuse.report = func(netip.Addr, int, string) {}
				g.abuse.maxUnseen = 500
				g.abuse.seen.Store(1 << 40) // the chain keeps up
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				binary.BigEndian.PutUint32(buf[5:9], uint32(2*i+1)&0x7fffffff) // a new stream each time
				g.follow(buf)
			}
			if g.abuse.abused != "" {
				b.Fatalf("a legitimate stream judged abusive: %s", g.abuse.abused)
			}
		})
	}
}
