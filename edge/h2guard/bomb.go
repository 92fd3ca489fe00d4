package h2guard

import "golang.org/x/net/http2/hpack"

// The HPACK bomb guard. A header block of one-byte references to a 4 KB dynamic-table
// entry decodes to a hundred times its size; Go's HTTP/2 server decodes every such
// block up to its header list limit (256 KiB here), checks each field, builds a
// request and answers 431 from a goroutine of its own, and the chain never sees it:
// from ten sources, the legitimate p99 stalled 100× for the half second the unseen
// stream bound took to close each connection (README, Attacks). The guard decodes the
// connection's header blocks itself, with a decoder of the same table size fed the
// same fragments, so its dynamic table is the server's, and counts the decoded size
// (HPACK's, as the server's limit counts it: name, value and 32 bytes per field). A
// block that decodes past Config.MaxHeaderBytes from less than 1/bombRatio of that in
// compressed bytes is a bomb: the read that carries it fails before the server
// decodes it, GOAWAY ENHANCE_YOUR_CALM, and the source is charged abuseCharge.
// Literals cost their compressed size at most 8/5 (Huffman) plus 32 bytes a field,
// so only references — the compression doing the attacker's work — reach the ratio.
//
// What it costs a legitimate request: decoding its header block a second time,
// mostly table references (no allocation) once a client's fields are in the table.

// bombRatio is the decoded ÷ compressed size past which a header block over the limit
// is a bomb.
const bombRatio = 16

// Header-block frame flags beyond END_HEADERS (RFC 9113 §6.2).
const (
	flagPadded   = 0x8
	flagPriority = 0x20
)

// serverTableSize is the dynamic table size Go's HTTP/2 server decodes with (the
// protocol's initial SETTINGS_HEADER_TABLE_SIZE; it announces no other).
const serverTableSize = 4096

// bomb is the HPACK bomb guard of one connection, used by its reading goroutine.
type bomb struct {
	limit int // Config.MaxHeaderBytes; zero: no bomb checks
	dec   *hpack.Decoder
	dead  bool // the decoder failed: the server's fails too and ends the connection

	in, out int  // compressed bytes fed and decoded bytes of the current block
	over    bool // out passed limit: decoding goes on only to keep the table in step
	bombed  bool // the block is a bomb

	// The fragment of the frame being read: pre bytes of padding length and priority
	// to skip first (padded: the first of them is the padding length), then frag bytes
	// of block, then padding.
	padded bool
	pre    int
	frag   int
}

// frame starts a HEADERS or CONTINUATION frame of flags and payload length n.
func (g *bomb) frame(typ, flags uint8, n int) {
	if g.limit == 0 || g.dead {
		return
	}
	if g.dec == nil {
		g.dec = hpack.NewDecoder(serverTableSize, g.emit)
		g.dec.SetMaxStringLength(g.limit * bombRatio)
	}
	g.padded, g.pre, g.frag = false, 0, n
	if typ == frameHeaders {
		g.in, g.out, g.over = 0, 0, false
		g.dec.SetEmitEnabled(true)
		if flags&flagPadded != 0 {
			g.padded, g.pre = true, 1
		}
		if flags&flagPriority != 0 {
			g.pre += 5
		}
		g.frag -= g.pre
	}
}

// emit counts a decoded field against the block's limit.
func (g *bomb) emit(f hpack.HeaderField) {
	g.out += int(f.Size())
	if g.out <= g.limit {
		return
	}
	g.dec.SetEmitEnabled(false)
	g.over = true
	if g.out > bombRatio*max(g.in, 1) {
		g.bombed = true
	}
}

// payload feeds b, bytes of the current frame's payload in order.
func (g *bomb) payload(b []byte) {
	if g.limit == 0 || g.dead || g.bombed {
		return
	}
	if g.pre > 0 {
		k := min(g.pre, len(b))
		if g.padded {
			g.frag -= int(b[0]) // the padding length: the fragment ends before it
			g.padded = false
		}
		g.pre -= k
		b = b[k:]
	}
	b = b[:min(len(b), max(g.frag, 0))]
	if len(b) == 0 {
		return
	}
	g.frag -= len(b)
	g.in += len(b)
	if _, err := g.dec.Write(b); err != nil {
		g.dead = true
	}
}

// end closes the block at END_HEADERS.
func (g *bomb) end() {
	if g.dec != nil && !g.dead && g.dec.Close() != nil {
		g.dead = true
	}
}
