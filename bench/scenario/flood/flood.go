// Package flood is the drop-cost scenario's flooders: each sends one kind of unit that a
// layer of h3edge refuses — raw datagrams (Datagram), QUIC handshakes (QUICConn), TCP
// connections (TCP), request streams (Requests, over HTTP/3 or HTTP/2) — from its own
// loopback sources, as fast as the client's CPU allows, for a bounded time. Unlike
// bench.Run's clients they never redial behind the caller's back, so every unit is one
// the flooder chose to send.
package flood

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"golang.org/x/net/ipv4"

	"github.com/h3edge/h3edge/bench"
	"github.com/h3edge/h3edge/bench/quicpkt"
)

// Flooder sends units for d (and no longer than ctx allows) and reports what it saw.
// It may be called again; Close releases its sockets.
type Flooder interface {
	Flood(ctx context.Context, d time.Duration) Stats
	Close()
}

// Stats is a flood seen from the client: units sent and their outcomes by name
// (an HTTP status code, a bench.ErrorKind, or a flooder's own word such as "dropped").
type Stats struct {
	Sent     int64            `json:"sent"`
	Outcomes map[string]int64 `json:"outcomes,omitempty"`
}

// outcomes counts outcomes by name; safe for concurrent use.
type outcomes struct {
	mu sync.Mutex
	m  map[string]int64
}

func (o *outcomes) add(name string, n int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = make(map[string]int64)
	}
	o.m[name] += n
}

func (o *outcomes) stats() Stats {
	o.mu.Lock()
	defer o.mu.Unlock()
	var st Stats
	st.Outcomes = make(map[string]int64, len(o.m))
	for k, v := range o.m {
		st.Outcomes[k] = v
		st.Sent += v
	}
	return st
}

// CaptureInitial returns the first datagram of a real QUIC handshake: quic-go dials a
// UDP socket of ours that never answers, and the first thing it receives is the
// client's Initial (padded to at least 1200 bytes, as every Initial is).
func CaptureInitial(ctx context.Context, tc *tls.Config) ([]byte, error) {
	sink, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	defer sink.Close()
	stop, err := startDial(ctx, sink.LocalAddr(), tc, 2*time.Second)
	if err != nil {
		return nil, err
	}
	defer stop()
	sink.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 64<<10)
	n, _, err := sink.ReadFromUDP(buf)
	if err != nil {
		return nil, fmt.Errorf("bench: capturing a QUIC Initial: %w", err)
	}
	if n < 1200 || buf[0]&0xf0 != 0xc0 { // long header, type Initial (QUIC v1)
		return nil, fmt.Errorf("bench: captured datagram (%d bytes, first byte %#x) is not a QUIC Initial", n, buf[0])
	}
	return buf[:n:n], nil
}

// Datagram sends one datagram over and over from each source, in batches
// (sendmmsg), as fast as it can, and counts the datagrams that come back.
type Datagram struct {
	conns   []*net.UDPConn
	payload []byte
	dst     *net.UDPAddr
	// Refresh, if set, makes a new payload before each flood (a Retry token ages).
	Refresh func(ctx context.Context) ([]byte, error)
}

// NewDatagram binds one socket per source; each Flood sends payload to dst from all
// of them.
func NewDatagram(srcs []netip.Addr, dst netip.AddrPort, payload []byte) (*Datagram, error) {
	f := &Datagram{payload: payload, dst: net.UDPAddrFromAddrPort(dst)}
	for _, src := range srcs {
		uc, err := net.ListenUDP("udp", &net.UDPAddr{IP: src.AsSlice()})
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("bench: bind source %v: %w", src, err)
		}
		f.conns = append(f.conns, uc)
	}
	return f, nil
}

// Flood implements Flooder.
func (f *Datagram) Flood(ctx context.Context, d time.Duration) Stats {
	var o outcomes
	if f.Refresh != nil {
		p, err := f.Refresh(ctx)
		if err != nil {
			o.add("payload: "+err.Error(), 1)
			return o.stats()
		}
		f.payload = p
	}
	end := time.Now().Add(d)
	var sent, failed, answered atomic.Int64
	var wg, readers sync.WaitGroup
	for _, uc := range f.conns {
		wg.Go(func() {
			pc := ipv4.NewPacketConn(uc)
			ms := make([]ipv4.Message, 32)
			for i := range ms {
				ms[i] = ipv4.Message{Buffers: [][]byte{f.payload}, Addr: f.dst}
			}
			for ctx.Err() == nil && time.Now().Before(end) {
				n, err := pc.WriteBatch(ms, 0)
				sent.Add(int64(n))
				if err != nil {
					failed.Add(1)
					time.Sleep(time.Millisecond)
				}
			}
		})
		// Whatever comes back (Retry, CONNECTION_REFUSED) is counted until shortly
		// after the flood.
		uc.SetReadDeadline(end.Add(50 * time.Millisecond))
		readers.Go(func() {
			buf := make([]byte, 2048)
			for {
				if _, _, err := uc.ReadFromUDPAddrPort(buf); err != nil {
					return
				}
				answered.Add(1)
			}
		})
	}
	wg.Wait()
	readers.Wait()
	o.add("sent", sent.Load())
	st := o.stats()
	st.Outcomes["answered"] = answered.Load() // not a unit sent
	if n := failed.Load(); n > 0 {
		st.Outcomes["write errors"] = n
	}
	return st
}

// Close implements Flooder.
func (f *Datagram) Close() {
	for _, uc := range f.conns {
		uc.Close()
	}
}

// TCP opens TCP connections from its sources and waits for the server to close
// each one (a refused accept is a reset), then closes its end with a reset too, so no
// TIME_WAIT piles up.
type TCP struct {
	Srcs    []netip.Addr   // the sources, taken in turn by the workers
	Dst     netip.AddrPort // the server
	Workers int            // connections in flight at once
	// Wait is how long a connection waits for the server to answer or close it; one
	// still open then is "held" (a tarpit's). If zero, a second.
	Wait time.Duration
}

// Flood implements Flooder.
func (f *TCP) Flood(ctx context.Context, d time.Duration) Stats {
	end := time.Now().Add(d)
	wait := f.Wait
	if wait <= 0 {
		wait = time.Second
	}
	var o outcomes
	var wg sync.WaitGroup
	for w := range f.Workers {
		src := f.Srcs[w%len(f.Srcs)]
		wg.Go(func() {
			dl := &net.Dialer{LocalAddr: &net.TCPAddr{IP: src.AsSlice()}, Timeout: time.Second}
			buf := make([]byte, 64)
			for ctx.Err() == nil && time.Now().Before(end) {
				c, err := dl.DialContext(ctx, "tcp", f.Dst.String())
				if err != nil {
					o.add(tcpOutcome(err), 1)
					select { // a moment's pause, not a spin, when dials fail
					case <-time.After(time.Millisecond):
					case <-ctx.Done():
					}
					continue
				}
				c.SetReadDeadline(time.Now().Add(wait))
				_, err = c.Read(buf)
				switch {
				case err == nil:
					o.add("open", 1) // the server said something: not refused
				case bench.Classify(err) == bench.ErrTimeout:
					o.add("held", 1) // neither answered nor closed
				default:
					o.add(tcpOutcome(err), 1)
				}
				c.(*net.TCPConn).SetLinger(0)
				c.Close()
			}
		})
	}
	wg.Wait()
	return o.stats()
}

// tcpOutcome names a TCP error: "reset" (closed by the server, RST or FIN), "refused",
// "timeout" (of the dial) or "other".
func tcpOutcome(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF):
		return "reset"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case bench.Classify(err) == bench.ErrTimeout:
		return "timeout"
	}
	return "other"
}

// Close implements Flooder.
func (f *TCP) Close() {}

// QUICConn dials QUIC connections from its sources, many at a time, each dial a
// new connection: a real first flight, Retry answered if asked. An admitted connection
// is closed at once.
type QUICConn struct {
	conns   []*net.UDPConn
	trs     []*quic.Transport
	dst     *net.UDPAddr
	tc      *tls.Config
	qconf   *quic.Config
	workers int
}

// NewQUICConn binds one socket per source. The TLS configuration offers only an
// X25519 key share, so each first flight is one Initial packet (a post-quantum key
// share makes it two, which h3edge counts as two refusals).
func NewQUICConn(srcs []netip.Addr, dst netip.AddrPort, tc *tls.Config, workers int) (*QUICConn, error) {
	tc = tc.Clone()
	tc.NextProtos = []string{http3.NextProtoH3}
	tc.CurvePreferences = []tls.CurveID{tls.X25519}
	f := &QUICConn{
		dst: net.UDPAddrFromAddrPort(dst), tc: tc, workers: workers,
		qconf: &quic.Config{HandshakeIdleTimeout: 2 * time.Second},
	}
	for _, src := range srcs {
		uc, err := net.ListenUDP("udp", &net.UDPAddr{IP: src.AsSlice()})
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("bench: bind source %v: %w", src, err)
		}
		f.conns = append(f.conns, uc)
		f.trs = append(f.trs, &quic.Transport{Conn: uc})
	}
	return f, nil
}

// Flood implements Flooder.
func (f *QUICConn) Flood(ctx context.Context, d time.Duration) Stats {
	end := time.Now().Add(d)
	var o outcomes
	var wg sync.WaitGroup
	for w := range f.workers {
		tr := f.trs[w%len(f.trs)]
		wg.Go(func() {
			for ctx.Err() == nil && time.Now().Before(end) {
				dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				qc, err := tr.Dial(dctx, f.dst, f.tc, f.qconf)
				cancel()
				if err == nil {
					o.add("admitted", 1)
					qc.CloseWithError(0, "")
					continue
				}
				if ctx.Err() != nil {
					return
				}
				o.add(string(bench.Classify(err)), 1)
			}
		})
	}
	wg.Wait()
	return o.stats()
}

// Close implements Flooder.
func (f *QUICConn) Close() {
	for _, tr := range f.trs {
		tr.Close()
	}
	for _, uc := range f.conns {
		uc.Close()
	}
}

// Requests sends requests on one connection, streams at a time, closed loop.
type Requests struct {
	rt      func(*http.Request) (*http.Response, error)
	url     *url.URL
	header  http.Header
	streams int
	// lost, if set, reports an error once the connection is gone: the flood stops
	// instead of redialing.
	lost    func() error
	closeFn func()
}

// Flood implements Flooder.
func (f *Requests) Flood(ctx context.Context, d time.Duration) Stats {
	end := time.Now().Add(d)
	header := f.header
	if header == nil {
		header = http.Header{} // net/http refuses a nil header
	}
	var o outcomes
	var wg sync.WaitGroup
	for range f.streams {
		wg.Go(func() {
			for ctx.Err() == nil && time.Now().Before(end) {
				if f.lost != nil && f.lost() != nil {
					o.add("connection lost", 1)
					return
				}
				rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				req := (&http.Request{Method: http.MethodGet, URL: f.url, Header: header,
					Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}).WithContext(rctx)
				resp, err := f.rt(req)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					o.add(strconv.Itoa(resp.StatusCode), 1)
				} else if ctx.Err() == nil {
					o.add(string(bench.Classify(err)), 1)
				}
				cancel()
			}
		})
	}
	wg.Wait()
	return o.stats()
}

// Close implements Flooder.
func (f *Requests) Close() {
	if f.closeFn != nil {
		f.closeFn()
	}
}

// NewH3 dials one HTTP/3 connection from src and floods target on it. It never
// redials: a lost connection ends the flood ("connection lost").
func NewH3(ctx context.Context, src netip.Addr, dst netip.AddrPort, target string, header http.Header, tc *tls.Config, streams int) (*Requests, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	uc, err := net.ListenUDP("udp", &net.UDPAddr{IP: src.AsSlice()})
	if err != nil {
		return nil, fmt.Errorf("bench: bind source %v: %w", src, err)
	}
	tr := &quic.Transport{Conn: uc}
	tc = tc.Clone()
	tc.NextProtos = []string{http3.NextProtoH3}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	qc, err := tr.Dial(dctx, net.UDPAddrFromAddrPort(dst), tc, &quic.Config{MaxIncomingStreams: -1, KeepAlivePeriod: 10 * time.Second})
	if err != nil {
		tr.Close()
		uc.Close()
		return nil, fmt.Errorf("bench: dial %v from %v: %w", dst, src, err)
	}
	cc := (&http3.Transport{DisableCompression: true}).NewClientConn(qc)
	return &Requests{
		rt: cc.RoundTrip, url: u, header: header, streams: streams,
		lost: func() error { return context.Cause(qc.Context()) },
		closeFn: func() {
			qc.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "")
			tr.Close()
			uc.Close()
		},
	}, nil
}

// NewH2 floods target over one HTTP/2 connection from src (bench.Run's HTTP/2
// transport: one TCP connection, requests beyond the server's stream limit wait on it).
func NewH2(src netip.Addr, dst netip.AddrPort, target string, header http.Header, tc *tls.Config, streams int) (*Requests, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	tr := bench.NewTransport(bench.H2, tc, dst, src, 5*time.Second)
	return &Requests{rt: tr.RoundTrip, url: u, header: header, streams: streams, closeFn: tr.CloseIdleConnections}, nil
}

// CaptureTokenInitial dials dst once through a relay bound to src and returns the
// client's first Initial that carries a token: after h3edge answered the first flight
// with a Retry, the client sends its first flight again with the Retry token, which
// h3edge bound to src's address (quic-go binds Retry tokens to the client's IP, not its
// port, and accepts them for 10 s). Replayed from src, it reaches the connection
// budget (ConnContext) without another Retry.
func CaptureTokenInitial(ctx context.Context, src netip.Addr, dst netip.AddrPort, tc *tls.Config) ([]byte, error) {
	relay, err := net.ListenUDP("udp", &net.UDPAddr{IP: src.AsSlice()})
	if err != nil {
		return nil, fmt.Errorf("bench: relay on %v: %w", src, err)
	}
	defer relay.Close()
	tc = tc.Clone()
	tc.CurvePreferences = []tls.CurveID{tls.X25519}
	stop, err := startDial(ctx, relay.LocalAddr(), tc, 3*time.Second)
	if err != nil {
		return nil, err
	}
	defer stop()
	server := net.UDPAddrFromAddrPort(dst)
	var client *net.UDPAddr
	relay.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 64<<10)
	for {
		n, from, err := relay.ReadFromUDP(buf)
		if err != nil {
			return nil, fmt.Errorf("bench: capturing a QUIC Initial with a Retry token: %w", err)
		}
		if from.AddrPort() == server.AddrPort() {
			if client != nil {
				relay.WriteToUDP(buf[:n], client)
			}
			continue
		}
		client = from
		if tok, ok := InitialToken(buf[:n]); ok && len(tok) > 0 {
			return bytes.Clone(buf[:n]), nil
		}
		relay.WriteToUDP(buf[:n], server)
	}
}

// startDial begins one HTTP/3 handshake to `to` from a fresh socket on 127.0.0.1, in
// the background, for at most d; stop ends it. The captures above read what it sends.
func startDial(ctx context.Context, to net.Addr, tc *tls.Config, d time.Duration) (stop func(), err error) {
	uc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	tr := &quic.Transport{Conn: uc}
	dctx, cancel := context.WithTimeout(ctx, d)
	tc = tc.Clone()
	tc.NextProtos = []string{http3.NextProtoH3}
	go func() {
		if qc, err := tr.Dial(dctx, to, tc, &quic.Config{}); err == nil {
			qc.CloseWithError(0, "")
		}
	}()
	return func() { cancel(); tr.Close(); uc.Close() }, nil
}

// InitialToken returns the token of a QUIC v1 Initial packet (RFC 9000, section 17.2.2).
func InitialToken(b []byte) ([]byte, bool) {
	if len(b) < 7 || b[0]&0xf0 != 0xc0 {
		return nil, false
	}
	i := 5
	for range 2 { // destination and source connection IDs
		if i >= len(b) {
			return nil, false
		}
		i += 1 + int(b[i])
	}
	if i >= len(b) {
		return nil, false
	}
	l, n := quicpkt.Varint(b[i:])
	if n == 0 || i+n+int(l) > len(b) {
		return nil, false
	}
	return b[i+n : i+n+int(l)], true
}
