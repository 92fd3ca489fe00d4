package h2guard

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
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
	// A browser-like block once its fields are in the dynamic table: every field a
	// reference (the first block, which fills the table, is written before the loop).
	var hbuf bytes.Buffer
	enc := hpack.NewEncoder(&hbuf)
	fields := []hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"},
		{Name: ":authority", Value: "api.example.com"}, {Name: ":path", Value: "/v1/items"},
		{Name: "user-agent", Value: "Mozilla/5.0 (X11; Linux x86_64) Chrome/131.0"}, {Name: "accept", Value: "application/json"},
		{Name: "authorization", Value: "Bearer 0123456789abcdef"}, {Name: "accept-encoding", Value: "gzip, br"}}
	block := func() []byte {
		hbuf.Reset()
		for _, f := range fields {
			enc.WriteField(f)
		}
		return bytes.Clone(hbuf.Bytes())
	}
	first := frame(frameHeaders, flagEndHeaders|flagEndStream, 1, block())
	buf := frame(frameHeaders, flagEndHeaders|flagEndStream, 3, block())
	buf = append(buf, frame(frameWindowUpdate, 0, 0, []byte{0, 0, 0x40, 0})...)
	buf = append(buf, frame(frameData, 0, 0, make([]byte, 64))...)
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("abuse=%v", on), func(b *testing.B) {
			g := &Conn{}
			if on {
				g.abuse.report = func(netip.Addr, int, string) {}
				g.abuse.maxUnseen = 500
				g.abuse.seen.Store(1 << 40) // the chain keeps up
				g.bomb.limit = 64 << 10
			}
			g.follow(first)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				binary.BigEndian.PutUint32(buf[5:9], uint32(2*i+3)&0x7fffffff) // a new stream each time
				g.follow(buf)
			}
			if g.abuse.abused != "" || g.bomb.dead {
				b.Fatalf("a legitimate stream judged abusive: %s", g.abuse.abused)
			}
		})
	}
}

// TestBomb feeds header blocks through the guard and checks which ones it judges an
// HPACK bomb: only a block that decodes past the limit from table references, and
// before the server reads it (the read that completes it fails).
func TestBomb(t *testing.T) {
	const limit = 64 << 10
	big := hpack.HeaderField{Name: "x-bomb", Value: strings.Repeat("b", 4000)}
	pseudo := []hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"},
		{Name: ":authority", Value: "a.test"}, {Name: ":path", Value: "/"}}
	// refs is a block of the pseudo-headers and n one-byte references to the newest
	// dynamic-table entry (index 62).
	refs := func(enc func(...hpack.HeaderField) []byte, n int) []byte {
		return append(enc(pseudo...), bytes.Repeat([]byte{0x80 | 62}, n)...)
	}
	tests := []struct {
		name  string
		build func(fr *http2.Framer, enc func(...hpack.HeaderField) []byte)
		bomb  bool
	}{
		{name: "bomb: 96 references to a 4 KB entry", bomb: true, build: func(fr *http2.Framer, enc func(...hpack.HeaderField) []byte) {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(append(pseudo, big)...), EndStream: true, EndHeaders: true})
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: refs(enc, 96), EndStream: true, EndHeaders: true})
		}},
		{name: "bomb: padded, with priority, in CONTINUATION frames", bomb: true, build: func(fr *http2.Framer, enc func(...hpack.HeaderField) []byte) {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(append(pseudo, big)...), EndStream: true, EndHeaders: true})
			b := refs(enc, 96)
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: b[:10], EndStream: true, PadLength: 7,
				Priority: http2.PriorityParam{StreamDep: 1, Weight: 3}})
			fr.WriteContinuation(3, false, b[10:40])
			fr.WriteContinuation(3, true, b[40:])
		}},
		{name: "legitimate: 200 requests of 15 references to a 4 KB entry", build: func(fr *http2.Framer, enc func(...hpack.HeaderField) []byte) {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(append(pseudo, big)...), EndStream: true, EndHeaders: true})
			for i := range 200 {
				fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(3 + 2*i), BlockFragment: refs(enc, 15), EndStream: true, EndHeaders: true})
			}
		}},
		{name: "legitimate: a 100 KB literal header section (a 431, no bomb)", build: func(fr *http2.Framer, enc func(...hpack.HeaderField) []byte) {
			var fs []hpack.HeaderField
			for i := range 25 {
				fs = append(fs, hpack.HeaderField{Name: fmt.Sprintf("x-%d", i), Value: strings.Repeat("v", 4000), Sensitive: true})
			}
			b := enc(append(pseudo, fs...)...)
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:16384], EndStream: true})
			for b = b[16384:]; len(b) > 16384; b = b[16384:] {
				fr.WriteContinuation(1, false, b[:16384])
			}
			fr.WriteContinuation(1, true, b)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var wire, hbuf bytes.Buffer
			wire.WriteString(http2.ClientPreface)
			fr := http2.NewFramer(&wire, nil)
			fr.WriteSettings()
			henc := hpack.NewEncoder(&hbuf)
			enc := func(fs ...hpack.HeaderField) []byte {
				hbuf.Reset()
				for _, f := range fs {
					henc.WriteField(f)
				}
				return bytes.Clone(hbuf.Bytes())
			}
			tt.build(fr, enc)
			stream := wire.Bytes()
			for _, size := range []int{1, 7, 1000, len(stream)} {
				g := &Conn{skip: prefaceLen}
				g.abuse.report = func(netip.Addr, int, string) {}
				g.bomb.limit = limit
				for i := 0; i < len(stream) && g.abuse.abused == ""; i += size {
					g.follow(stream[i:min(i+size, len(stream))])
				}
				if got := g.abuse.abused == "HPACK bomb"; got != tt.bomb {
					t.Fatalf("reads of %d bytes: bomb = %v (abused %q), want %v", size, got, g.abuse.abused, tt.bomb)
				}
				if g.bomb.dead {
					t.Fatalf("reads of %d bytes: the guard's decoder failed on valid blocks", size)
				}
			}
		})
	}
}

// FuzzFollow: any bytes, read in any split, follow without panicking — frames with
// padding longer than their payload, header blocks the decoder refuses, and a header
// block judged a bomb only if it decodes past the limit.
func FuzzFollow(f *testing.F) {
	var wire, hbuf bytes.Buffer
	wire.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&wire, nil)
	enc := hpack.NewEncoder(&hbuf)
	enc.WriteField(hpack.HeaderField{Name: "x-bomb", Value: strings.Repeat("b", 4000)})
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hbuf.Bytes(), EndHeaders: true, PadLength: 3})
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: bytes.Repeat([]byte{0x80 | 62}, 20), EndHeaders: true})
	f.Add(wire.Bytes(), 7)
	f.Add([]byte(http2.ClientPreface+"\x00\x00\x02\x01\x0c\x00\x00\x00\x01\xff\x82"), 1) // padding past the payload
	f.Fuzz(func(t *testing.T, stream []byte, size int) {
		size = max(1, size%64+1)
		g := &Conn{skip: prefaceLen}
		g.abuse.report = func(netip.Addr, int, string) {}
		g.bomb.limit = 64 << 10
		for i := 0; i < len(stream); i += size {
			g.follow(stream[i:min(i+size, len(stream))])
		}
		if g.abuse.abused == "HPACK bomb" && g.bomb.out <= g.bomb.limit {
			t.Fatalf("judged a bomb at %d decoded bytes", g.bomb.out)
		}
	})
}
