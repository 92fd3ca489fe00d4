package h2guard

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// The HTTP/2 abuse guard. Go's HTTP/2 server hides frames from handlers and bounds
// only some abuse itself: it closes a Rapid Reset connection once 400 reset requests
// wait for a handler (ENHANCE_YOUR_CALM), but the source simply reconnects, and it
// bounds a header section's bytes, not its frames (zero-length CONTINUATION frames are
// read for ever). Conn already follows every frame header on the connection
// for the header timeout; it also counts, per connection, the frames that cost the
// server work and give the client nothing, and ends the connection when they pass a
// bound no legitimate client reaches: GOAWAY ENHANCE_YOUR_CALM, then the read fails
// and the HTTP/2 server closes the connection. The source is charged through
// Config.Report as rejections (the edge's penalty box), so that a source that keeps
// trying is banned and then dropped at TCP accept, the cheapest layer.
//
// The bounds, per connection:
//   - resets: RST_STREAM frames from the client, plus frames that make the server reset
//     a stream (MadeYouReset: WINDOW_UPDATE of 0, DATA after END_STREAM, PRIORITY on
//     itself), may exceed the streams completed by at most resetSlack. A browser
//     cancels a few streams per page; a Rapid Reset client cancels all of them.
//     A RST_STREAM on a stream the server has answered and not ended yet (a gRPC
//     call, a download, a long poll given up) is not counted: it cancels work the
//     server has started to deliver, which a Rapid Reset does not wait for.
//     Charged: every reset over the completed count — a reset stream is a refused
//     request, as a 429 is (with the default abuse: one such connection bans).
//   - CONTINUATION frames: at most maxContinuations in one header section, at most
//     maxEmptyContinuations of them empty. A 256 KiB section (the parse limit) needs
//     16 frames of 16 KiB.
//   - unseen streams: requests that Go's HTTP/2 server answers itself and never hands
//     to the chain, where the stream budget and the penalty box would see them (431 for
//     a header block that decodes past the parse limit: an HPACK bomb of one-byte
//     references to a 4 KB table entry; 400 for a malformed request). The streams
//     opened minus those the chain has seen (Completions) may exceed
//     Config.MaxUnseen (the edge: twice the streams a client may have open,
//     2 × ip.max_streams_per_connection, as a handler not yet started is one of
//     those) by resetSlack. Charged: the streams past that, as
//     429s would have been.
//   - empty frames (DATA without payload or END_STREAM, HEADERS or CONTINUATION without
//     payload or END_HEADERS) and control frames (SETTINGS, PING, PRIORITY without ACK):
//     each in a token bucket of frameBurst refilled at frameRate per second.
//     Clients send a SETTINGS frame or two, PINGs every few seconds at most — but for
//     a PING that follows DATA or HEADERS the server wrote, which costs nothing:
//     gRPC clients send one after each burst of data they receive, to size their
//     window (grpc-go's BDP estimation; gRPC servers let those through the same way).
//     Charged: abuseCharge rejections, so a source banned on its fifth attempt
//     within abuse.within (with the default abuse.rejections of 50).
const (
	resetSlack            = 100
	maxContinuations      = 32
	maxEmptyContinuations = 4
	frameBurst            = 100
	frameRate             = 10
	abuseCharge           = 10
)

// HTTP/2 frame types and flags the abuse guard reads, beyond those of the header
// timeout.
const (
	frameData          = 0x0
	framePriority      = 0x2
	frameRSTStream     = 0x3
	frameSettings      = 0x4
	framePing          = 0x6
	frameGoAway        = 0x7
	frameWindowUpdate  = 0x8
	flagEndStream      = 0x1
	flagAck            = 0x1
	errEnhanceYourCalm = 0xb
)

// ErrAbuse is the read error that ends an abusive HTTP/2 connection: the HTTP/2
// server closes it.
var ErrAbuse = errors.New("h2guard: HTTP/2 connection closed for abuse")

// abuse is the abuse guard's state of one connection. Its fields but completed are
// used by the connection's reading goroutine only.
type abuse struct {
	// report charges the source; nil: no abuse checks (tests of the header timeout).
	report func(addr netip.Addr, charge int, reason string)
	// maxUnseen is how many streams may be opened and not yet seen by the chain;
	// zero: not bounded. seen counts those the chain has seen (Completions).
	maxUnseen int64
	seen      atomic.Int64
	// completed counts the connection's requests whose handler returned without the
	// stream being reset, written by the handler goroutines (Completions).
	completed atomic.Int64
	// sent is set by the writing goroutine when the server writes DATA or HEADERS,
	// and cleared by the next PING from the client, which that PING does not cost.
	sent atomic.Bool
	// mu guards open: the streams whose response header the server has written and
	// which it has not ended (END_STREAM, RST_STREAM), written by the writing
	// goroutine (wrote). A client's RST_STREAM on one of those cancels a request that
	// was answered — a gRPC call or a download given up — not one that cost the server
	// a handler for nothing, and is not counted as a reset.
	mu   sync.Mutex
	open map[uint32]struct{}

	resets   int64  // RST_STREAM from the client, and frames that make the server reset
	lastID   uint32 // the highest stream ID the client opened
	conts    int    // CONTINUATION frames in the current header section
	empties  int    // empty ones among them
	frameTyp uint8  // type of the frame whose payload is being read
	frameID  uint32 // its stream
	want     int    // payload bytes still to capture (WINDOW_UPDATE, PRIORITY)
	got      int
	payload  [5]byte
	ended    [32]uint32 // the client's last streams ended by END_STREAM, a ring
	endedAt  int
	empty    bucket
	control  bucket
	opened   int64  // streams the client opened
	over     int64  // unseen streams past the bound, when it was passed
	abused   string // why the connection is to be ended; "" while it is not
	closed   bool   // endAbuse has run
}

// bucket is a token bucket of frameBurst tokens refilled at frameRate per
// second. The zero value is full: the first take fills it.
type bucket struct {
	tokens float64
	last   time.Time
}

// take takes a token at now and reports whether there was one.
func (b *bucket) take(now time.Time) bool {
	if b.last.IsZero() {
		b.tokens = frameBurst
	} else {
		b.tokens = min(frameBurst, b.tokens+now.Sub(b.last).Seconds()*frameRate)
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// frame looks at a frame header: typ, flags, payload length n, stream id. It asks for
// the payload of the frames whose meaning is in it (capture).
func (a *abuse) frame(typ, flags uint8, n int, id uint32) {
	if a.report == nil || a.abused != "" {
		return
	}
	switch typ {
	case frameHeaders:
		a.conts, a.empties = 0, 0
		if id > a.lastID {
			a.lastID = id
			a.opened++
			if a.maxUnseen > 0 {
				if over := a.opened - a.seen.Load() - a.maxUnseen; over > resetSlack {
					a.abused = "streams the server answered itself (HPACK bomb, malformed requests)"
					a.over = over
				}
			}
		}
		if flags&flagEndStream != 0 {
			a.end(id)
		}
		if n == 0 && flags&flagEndHeaders == 0 && !a.empty.take(time.Now()) {
			a.abused = "empty frames"
		}
	case frameContinuation:
		a.conts++
		if n == 0 {
			a.empties++
		}
		if a.conts > maxContinuations || a.empties > maxEmptyContinuations {
			a.abused = "CONTINUATION flood"
		}
	case frameData:
		if a.wasEnded(id) {
			a.reset() // DATA after END_STREAM: the server resets the stream
		}
		if flags&flagEndStream != 0 {
			a.end(id)
		} else if n == 0 && !a.empty.take(time.Now()) {
			a.abused = "empty frames"
		}
	case frameRSTStream:
		if !a.answered(id) {
			a.reset()
		}
	case frameSettings, framePing:
		if flags&flagAck != 0 || typ == framePing && a.sent.Swap(false) {
			break // a PING after data the server sent: gRPC clients measure the link so
		}
		if !a.control.take(time.Now()) {
			a.abused = "SETTINGS or PING flood"
		}
	case framePriority:
		if n == 5 {
			a.frameTyp, a.frameID, a.want, a.got = typ, id, 5, 0 // judged by capture
		} else {
			a.priority() // a connection error for the server anyway
		}
	case frameWindowUpdate:
		if n == 4 && id != 0 {
			a.frameTyp, a.frameID, a.want, a.got = typ, id, 4, 0
		}
	}
}

// capture takes payload bytes of the frame asked for by frame, and judges the frame
// once they are all there.
func (a *abuse) capture(b []byte) {
	k := copy(a.payload[a.got:a.want], b)
	a.got += k
	if a.got < a.want {
		return
	}
	a.want = 0
	switch a.frameTyp {
	case frameWindowUpdate:
		if binary.BigEndian.Uint32(a.payload[:4])&0x7fffffff == 0 {
			a.reset() // a stream error: the server resets the stream
		}
	case framePriority:
		if binary.BigEndian.Uint32(a.payload[:4])&0x7fffffff == a.frameID {
			a.reset() // a stream depending on itself: the server resets it
		} else {
			a.priority()
		}
	}
}

// priority counts a PRIORITY frame against the control frames' bucket.
func (a *abuse) priority() {
	if !a.control.take(time.Now()) {
		a.abused = "PRIORITY flood"
	}
}

// end notes that the client ended stream id (END_STREAM).
func (a *abuse) end(id uint32) {
	a.ended[a.endedAt] = id
	a.endedAt = (a.endedAt + 1) % len(a.ended)
}

// wasEnded reports whether the client ended stream id lately.
func (a *abuse) wasEnded(id uint32) bool {
	for _, e := range a.ended {
		if e == id && id != 0 {
			return true
		}
	}
	return false
}

// answered reports whether the server had answered stream id and not ended it, and
// forgets it: the client's RST_STREAM ends it.
func (a *abuse) answered(id uint32) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.open[id]
	delete(a.open, id)
	return ok
}

// wrote notes a frame the server writes: typ, flags, stream id. A HEADERS frame that
// leaves the stream open answers it; END_STREAM or RST_STREAM ends it.
func (a *abuse) wrote(typ, flags uint8, id uint32) {
	data := typ == frameData || typ == frameHeaders
	if data {
		a.sent.Store(true)
	}
	answers := typ == frameHeaders && flags&flagEndStream == 0
	ends := data && flags&flagEndStream != 0 || typ == frameRSTStream
	if id == 0 || !answers && !ends {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if answers {
		if a.open == nil {
			a.open = make(map[uint32]struct{})
		}
		a.open[id] = struct{}{}
	} else {
		delete(a.open, id)
	}
}

// reset counts a reset stream and judges the connection by it.
func (a *abuse) reset() {
	a.resets++
	if a.resets > a.completed.Load()+resetSlack {
		a.abused = "streams reset (Rapid Reset or MadeYouReset)"
	}
}

// charge is what the abuse costs the source, in rejections: the resets past the
// completed streams, or the unseen streams past their bound, as 429s would have
// counted them; otherwise abuseCharge.
func (a *abuse) charge() int {
	if over := a.resets - a.completed.Load(); over > resetSlack {
		return int(over)
	}
	return int(max(a.over, abuseCharge))
}

// goAway returns a GOAWAY frame with ENHANCE_YOUR_CALM, naming the last stream the
// client opened as the last one processed.
func (a *abuse) goAway() []byte {
	f := make([]byte, frameHeaderLen+8)
	f[2] = 8 // length
	f[3] = frameGoAway
	binary.BigEndian.PutUint32(f[9:], a.lastID&0x7fffffff)
	binary.BigEndian.PutUint32(f[13:], errEnhanceYourCalm)
	return f
}

// goAwayTimeout bounds the write of the abuse GOAWAY: a client that does not read
// does not get it.
const goAwayTimeout = 100 * time.Millisecond

// endAbuse ends an abusive connection: it charges the source, sends GOAWAY
// ENHANCE_YOUR_CALM and returns the error for Read to return. The GOAWAY is written
// beside the HTTP/2 server's own writer: tls.Conn writes one Write call at a time, so
// the frame lands between two of the server's writes — in the middle of a frame only
// if the server was writing one in several parts, and then the client, an abuser, gets
// a garbled end of a connection that is closing anyway.
func (c *Conn) endAbuse() error {
	a := &c.abuse
	a.closed = true
	c.Conn.SetWriteDeadline(time.Now().Add(goAwayTimeout))
	c.Conn.Write(a.goAway())
	// After the GOAWAY: a ban resets the source's connections at once.
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		a.report(ap.Addr().Unmap(), a.charge(), a.abused)
	}
	return ErrAbuse
}
