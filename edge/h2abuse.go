package edge

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"time"
)

// The HTTP/2 abuse guard. Go's HTTP/2 server hides frames from handlers and bounds
// only some abuse itself: it closes a Rapid Reset connection once 400 reset requests
// wait for a handler (ENHANCE_YOUR_CALM), but the source simply reconnects, and it
// bounds a header section's bytes, not its frames (zero-length CONTINUATION frames are
// read for ever). h2HeaderGuard already follows every frame header on the connection
// for the header timeout; it also counts, per connection, the frames that cost the
// server work and give the client nothing, and ends the connection when they pass a
// bound no legitimate client reaches: GOAWAY ENHANCE_YOUR_CALM, then the read fails
// and the HTTP/2 server closes the connection. The source is charged to the penalty
// box as rejections, so that a source that keeps trying is banned and then dropped at
// TCP accept, the cheapest layer.
//
// The bounds, per connection:
//   - resets: RST_STREAM frames from the client, plus frames that make the server reset
//     a stream (MadeYouReset: WINDOW_UPDATE of 0, DATA after END_STREAM, PRIORITY on
//     itself), may exceed the streams completed by at most h2ResetSlack. A browser
//     cancels a few streams per page; a Rapid Reset client cancels all of them.
//     Charged: every reset over the completed count — a reset stream is a refused
//     request, as a 429 is (with the default abuse: one such connection bans).
//   - CONTINUATION frames: at most h2MaxContinuations in one header section, at most
//     h2MaxEmptyContinuations of them empty. A 256 KiB section (the parse limit) needs
//     16 frames of 16 KiB.
//   - unseen streams: requests that Go's HTTP/2 server answers itself and never hands
//     to the chain, where the stream budget and the penalty box would see them (431 for
//     a header block that decodes past the parse limit: an HPACK bomb of one-byte
//     references to a 4 KB table entry; 400 for a malformed request). The streams
//     opened minus those the chain has seen may exceed maxUnseen, twice the streams a
//     client may have open (2 × ip.max_streams_per_connection: a handler not yet
//     started is one of those), by h2ResetSlack. Charged: the streams past that, as
//     429s would have been.
//   - empty frames (DATA without payload or END_STREAM, HEADERS or CONTINUATION without
//     payload or END_HEADERS) and control frames (SETTINGS, PING, PRIORITY without ACK):
//     each in a token bucket of h2FrameBurst refilled at h2FrameRate per second.
//     Clients send a SETTINGS frame or two, PINGs every few seconds at most.
//     Charged: h2AbuseCharge rejections, so a source banned on its fifth attempt
//     within abuse.within (with the default abuse.rejections of 50).
const (
	h2ResetSlack            = 100
	h2MaxContinuations      = 32
	h2MaxEmptyContinuations = 4
	h2FrameBurst            = 100
	h2FrameRate             = 10
	h2AbuseCharge           = 10
)

// HTTP/2 frame types and flags the abuse guard reads, beyond those of the header
// timeout.
const (
	h2FrameData          = 0x0
	h2FramePriority      = 0x2
	h2FrameRSTStream     = 0x3
	h2FrameSettings      = 0x4
	h2FramePing          = 0x6
	h2FrameGoAway        = 0x7
	h2FrameWindowUpdate  = 0x8
	h2FlagEndStream      = 0x1
	h2FlagAck            = 0x1
	h2ErrEnhanceYourCalm = 0xb
)

// errH2Abuse is the read error that ends an abusive HTTP/2 connection.
var errH2Abuse = errors.New("edge: HTTP/2 connection closed for abuse")

// h2Abuse is the abuse guard's state of one connection. Its fields but completed are
// used by the connection's reading goroutine only.
type h2Abuse struct {
	// report charges the source; nil: no abuse checks (tests of the header timeout).
	report func(addr netip.Addr, charge int, reason string)
	// maxUnseen is how many streams may be opened and not yet seen by the chain;
	// zero: not bounded. seen counts those the chain has seen (h2Completions).
	maxUnseen int64
	seen      atomic.Int64
	// completed counts the connection's requests whose handler returned without the
	// stream being reset, written by the handler goroutines (h2Completions).
	completed atomic.Int64

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
	empty    h2Bucket
	control  h2Bucket
	opened   int64  // streams the client opened
	over     int64  // unseen streams past the bound, when it was passed
	abused   string // why the connection is to be ended; "" while it is not
	closed   bool   // endAbuse has run
}

// h2Bucket is a token bucket of h2FrameBurst tokens refilled at h2FrameRate per
// second. The zero value is full: the first take fills it.
type h2Bucket struct {
	tokens float64
	last   time.Time
}

// take takes a token at now and reports whether there was one.
func (b *h2Bucket) take(now time.Time) bool {
	if b.last.IsZero() {
		b.tokens = h2FrameBurst
	} else {
		b.tokens = min(h2FrameBurst, b.tokens+now.Sub(b.last).Seconds()*h2FrameRate)
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
func (a *h2Abuse) frame(typ, flags uint8, n int, id uint32) {
	if a.report == nil || a.abused != "" {
		return
	}
	switch typ {
	case h2FrameHeaders:
		a.conts, a.empties = 0, 0
		if id > a.lastID {
			a.lastID = id
			a.opened++
			if a.maxUnseen > 0 {
				if over := a.opened - a.seen.Load() - a.maxUnseen; over > h2ResetSlack {
					a.abused = "streams the server answered itself (HPACK bomb, malformed requests)"
					a.over = over
				}
			}
		}
		if flags&h2FlagEndStream != 0 {
			a.end(id)
		}
		if n == 0 && flags&h2FlagEndHeaders == 0 && !a.empty.take(time.Now()) {
			a.abused = "empty frames"
		}
	case h2FrameContinuation:
		a.conts++
		if n == 0 {
			a.empties++
		}
		if a.conts > h2MaxContinuations || a.empties > h2MaxEmptyContinuations {
			a.abused = "CONTINUATION flood"
		}
	case h2FrameData:
		if a.wasEnded(id) {
			a.reset() // DATA after END_STREAM: the server resets the stream
		}
		if flags&h2FlagEndStream != 0 {
			a.end(id)
		} else if n == 0 && !a.empty.take(time.Now()) {
			a.abused = "empty frames"
		}
	case h2FrameRSTStream:
		a.reset()
	case h2FrameSettings, h2FramePing:
		if flags&h2FlagAck == 0 && !a.control.take(time.Now()) {
			a.abused = "SETTINGS or PING flood"
		}
	case h2FramePriority:
		if n == 5 {
			a.frameTyp, a.frameID, a.want, a.got = typ, id, 5, 0 // judged by capture
		} else {
			a.priority() // a connection error for the server anyway
		}
	case h2FrameWindowUpdate:
		if n == 4 && id != 0 {
			a.frameTyp, a.frameID, a.want, a.got = typ, id, 4, 0
		}
	}
}

// capture takes payload bytes of the frame asked for by frame, and judges the frame
// once they are all there.
func (a *h2Abuse) capture(b []byte) {
	k := copy(a.payload[a.got:a.want], b)
	a.got += k
	if a.got < a.want {
		return
	}
	a.want = 0
	switch a.frameTyp {
	case h2FrameWindowUpdate:
		if binary.BigEndian.Uint32(a.payload[:4])&0x7fffffff == 0 {
			a.reset() // a stream error: the server resets the stream
		}
	case h2FramePriority:
		if binary.BigEndian.Uint32(a.payload[:4])&0x7fffffff == a.frameID {
			a.reset() // a stream depending on itself: the server resets it
		} else {
			a.priority()
		}
	}
}

// priority counts a PRIORITY frame against the control frames' bucket.
func (a *h2Abuse) priority() {
	if !a.control.take(time.Now()) {
		a.abused = "PRIORITY flood"
	}
}

// end notes that the client ended stream id (END_STREAM).
func (a *h2Abuse) end(id uint32) {
	a.ended[a.endedAt] = id
	a.endedAt = (a.endedAt + 1) % len(a.ended)
}

// wasEnded reports whether the client ended stream id lately.
func (a *h2Abuse) wasEnded(id uint32) bool {
	for _, e := range a.ended {
		if e == id && id != 0 {
			return true
		}
	}
	return false
}

// reset counts a reset stream and judges the connection by it.
func (a *h2Abuse) reset() {
	a.resets++
	if a.resets > a.completed.Load()+h2ResetSlack {
		a.abused = "streams reset (Rapid Reset or MadeYouReset)"
	}
}

// charge is what the abuse costs the source, in rejections: the resets past the
// completed streams, or the unseen streams past their bound, as 429s would have
// counted them; otherwise h2AbuseCharge.
func (a *h2Abuse) charge() int {
	if over := a.resets - a.completed.Load(); over > h2ResetSlack {
		return int(over)
	}
	return int(max(a.over, h2AbuseCharge))
}

// goAway returns a GOAWAY frame with ENHANCE_YOUR_CALM, naming the last stream the
// client opened as the last one processed.
func (a *h2Abuse) goAway() []byte {
	f := make([]byte, h2FrameHeaderLen+8)
	f[2] = 8 // length
	f[3] = h2FrameGoAway
	binary.BigEndian.PutUint32(f[9:], a.lastID&0x7fffffff)
	binary.BigEndian.PutUint32(f[13:], h2ErrEnhanceYourCalm)
	return f
}

// h2GoAwayTimeout bounds the write of the abuse GOAWAY: a client that does not read
// does not get it.
const h2GoAwayTimeout = 100 * time.Millisecond

// endAbuse ends an abusive connection: it charges the source, sends GOAWAY
// ENHANCE_YOUR_CALM and returns the error for Read to return. The GOAWAY is written
// beside the HTTP/2 server's own writer: tls.Conn writes one Write call at a time, so
// the frame lands between two of the server's writes — in the middle of a frame only
// if the server was writing one in several parts, and then the client, an abuser, gets
// a garbled end of a connection that is closing anyway.
func (c *h2HeaderGuard) endAbuse() error {
	a := &c.abuse
	a.closed = true
	c.Conn.SetWriteDeadline(time.Now().Add(h2GoAwayTimeout))
	c.Conn.Write(a.goAway())
	// After the GOAWAY: a ban resets the source's connections at once.
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		a.report(ap.Addr().Unmap(), a.charge(), a.abused)
	}
	return errH2Abuse
}

// h2ConnKey is the context key of an HTTP/2 connection's guard (ConnContext).
type h2ConnKey struct{}

// h2Completions counts the HTTP/2 requests each guarded connection hands the chain
// (seen), and those completed: whose handler returned while the stream was still
// open, the counterweight of the resets the abuse guard counts.
func h2Completions(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g, _ := r.Context().Value(h2ConnKey{}).(*h2HeaderGuard)
		if r.ProtoMajor != 2 || g == nil {
			next.ServeHTTP(w, r)
			return
		}
		g.abuse.seen.Add(1)
		next.ServeHTTP(w, r)
		if r.Context().Err() == nil {
			g.abuse.completed.Add(1)
		}
	})
}

// withH2Guard puts an HTTP/2 connection's guard in its context, for h2Completions.
func withH2Guard(ctx context.Context, c net.Conn) context.Context {
	if g, ok := c.(*h2HeaderGuard); ok {
		return context.WithValue(ctx, h2ConnKey{}, g)
	}
	return ctx
}

// chargeAbuse charges a source whose connection was ended for abuse with charge
// rejections toward a ban (fewer when the ban comes first), and logs it (sampled).
func (s *Server) chargeAbuse(addr netip.Addr, charge int, reason string) {
	now := time.Now()
	banned := false
	for range charge {
		if banned = s.box.Reject(addr, now); banned {
			break
		}
	}
	if ok, suppressed := s.rejectLog.allow(now); ok {
		s.log.Warn("connection closed for abuse", "source", addr.String(), "reason", reason,
			"charge", charge, "banned", banned, "suppressed", suppressed)
	}
}
