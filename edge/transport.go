package edge

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/limiter/penalty"
	"github.com/h3edge/h3edge/quicconn"
)

// newGuard builds the per-source transport budgets of the ip: section.
func newGuard(c config.IPConfig, banned func(netip.Addr) bool) (*quicconn.Guard, error) {
	gc := guardConfig(c)
	gc.Banned = banned
	return quicconn.New(gc)
}

// newPenaltyBox builds the penalty box of the abuse: section; onBan runs for every new
// ban made on this edge.
func newPenaltyBox(cfg *config.Config, onBan func(penalty.Ban)) (*penalty.Box, error) {
	return penalty.New(penaltyConfig(cfg, onBan))
}

// penaltyConfig translates the abuse: section, with the prefix lengths and the bound of
// ip:.
func penaltyConfig(cfg *config.Config, onBan func(penalty.Ban)) penalty.Config {
	return penalty.Config{
		Rejections: cfg.Abuse.Rejections,
		Within:     cfg.Abuse.Within,
		Ban:        cfg.Abuse.Ban,
		MaxBan:     cfg.Abuse.MaxBan,
		IPv4Prefix: cfg.IP.IPv4Prefix,
		IPv6Prefix: cfg.IP.IPv6Prefix,
		MaxTracked: cfg.IP.MaxTracked,
		OnBan:      onBan,
	}
}

// onBan drops a newly banned source everywhere it is still connected: its QUIC
// connections and its TCP connections are closed now; its datagrams, handshakes and
// accepts are dropped from now on by the checks that read the box.
func (s *Server) onBan(b penalty.Ban) {
	quic := s.guard.Kick(b.Prefix)
	tcp := s.kickTCP(b.Prefix)
	s.log.Warn("source banned", "prefix", b.Prefix.String(), "until", b.Until.Format(time.RFC3339Nano),
		"count", b.Count, "reason", b.Reason, "closed_quic", quic, "closed_tcp", tcp)
	s.syncKernelBans()
	s.publishBan(b)
}

// syncKernelBans asks runKernelBans to refresh the kernel's ban filter now.
func (s *Server) syncKernelBans() {
	select {
	case s.kernelBans <- struct{}{}:
	default: // a refresh is already pending
	}
}

// runKernelBans keeps the kernel-level ban filter of the UDP socket (a BPF socket
// filter: banned datagrams never wake the edge up) equal to the bans in force: on every
// ban change (syncKernelBans) and every second, for the bans that end by themselves. The
// user-space filter stays in place and covers the lag, the prefixes beyond the kernel
// filter's bound, and systems without it. A failure is logged, never fatal.
func (s *Server) runKernelBans(done <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var last []netip.Prefix
	failing := false
	for {
		bans := s.box.List(time.Now())
		ps := make([]netip.Prefix, len(bans))
		for i, b := range bans {
			ps[i] = b.Prefix
		}
		if failing || !slices.Equal(ps, last) {
			err := s.guard.SetKernelBans(ps)
			if err != nil && !failing {
				s.log.Warn("kernel ban filter not set: banned datagrams are dropped in user space only", "error", err)
			}
			failing, last = err != nil, ps
		}
		select {
		case <-done:
			return
		case <-s.kernelBans:
		case <-t.C:
		}
	}
}

// reject counts a rejection (429) of the request's source toward a ban.
func (s *Server) reject(r *http.Request, now time.Time) {
	s.box.Reject(clientAddr(r, s.rules.Load().trusted), now)
}

// guardConfig translates the ip: section.
func guardConfig(c config.IPConfig) quicconn.Config {
	return quicconn.Config{
		ConnRate:       c.Connections.Rate,
		ConnBurst:      c.Connections.Burst,
		StreamRate:     c.Streams.Rate,
		StreamBurst:    c.Streams.Burst,
		MaxConnections: c.MaxConnections,
		RetryAbove:     float64(c.RetryAbove),
		MaxTracked:     c.MaxTracked,
		IPv4Prefix:     c.IPv4Prefix,
		IPv6Prefix:     c.IPv6Prefix,
	}
}

// guardedListener closes TCP connections over their source's budget at accept, before
// any TLS work, and counts open ones against the source's cap.
type guardedListener struct {
	net.Listener
	s *Server
}

func (l guardedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
		if err != nil {
			return c, nil
		}
		addr := ap.Addr().Unmap()
		if l.s.banned(addr) {
			l.s.refusedTCP.banned.Add(1)
			reset(c)
			continue
		}
		slot, err := l.s.guard.Admit(addr, time.Now())
		if err != nil {
			if err == quicconn.ErrMaxConns {
				l.s.refusedTCP.maxConns.Add(1)
			} else {
				l.s.refusedTCP.rate.Add(1)
			}
			reset(c)
			continue
		}
		// The connection itself goes to the server, unwrapped: a wrapper's extra frame
		// on every write pushed HTTP/2's frame-writing goroutines past their initial
		// stack (a stack copy per flush). Its slot is found again by the conn when
		// the server reports it closed (connState).
		l.s.tcpConns.Store(c, &tcpSlot{slot: slot, addr: addr})
		limitUnsent(c)
		return c, nil
	}
}

// tcpSlot is an open TCP connection's place in its source's count.
type tcpSlot struct {
	slot *quicconn.Slot
	addr netip.Addr
}

// connState gives a TCP connection's slot back when the HTTP server is done with it
// (closed, or hijacked: then its new owner is no longer an HTTP connection).
func (s *Server) connState(c net.Conn, st http.ConnState) {
	if st != http.StateClosed && st != http.StateHijacked {
		return
	}
	if g, ok := c.(*h2HeaderGuard); ok {
		c = g.Conn
	}
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if v, ok := s.tcpConns.LoadAndDelete(c); ok {
		v.(*tcpSlot).slot.Release()
	}
}

// reset closes c with a RST (SO_LINGER 0): no FIN handshake to wait for.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

// refusedTCP counts TCP connections closed at accept, by reason.
type refusedTCP struct {
	banned, rate, maxConns atomic.Uint64
}

// kickTCP closes the open TCP connections of sources in p (a new ban) and returns how
// many it closed. Bans are rare; the walk is over open connections only.
func (s *Server) kickTCP(p netip.Prefix) int {
	n := 0
	s.tcpConns.Range(func(k, v any) bool {
		if p.Contains(v.(*tcpSlot).addr) {
			reset(k.(net.Conn)) // the server then reports it closed: connState releases it
			n++
		}
		return true
	})
	return n
}

// tooManyStreams is the prebuilt answer to an HTTP/1.1 or HTTP/2 request over its
// source's stream budget: nothing in it is computed per request.
var tooManyStreams = []byte(`{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"too many requests from this source"}`)

// admitH3Stream charges a new HTTP/3 request stream from addr to the source's stream
// budget, as streamBudget charges an HTTP/1.1 or HTTP/2 request, but before quic-go
// reads the HEADERS frame: streams that never send one are bounded by the budget
// too. Over it, the stream is refused and the source charged toward a ban, unless it
// is a trusted proxy (whose clients' addresses are not known yet).
func (s *Server) admitH3Stream(addr netip.Addr) bool {
	now := time.Now()
	if s.box.Banned(addr) {
		s.metrics.refusedStream(3, reasonBanned)
		return false
	}
	if s.guard.AllowStream(addr, now) {
		return true
	}
	if !slices.ContainsFunc(s.rules.Load().trusted, func(p netip.Prefix) bool { return p.Contains(addr) }) {
		s.box.Reject(addr, now)
	}
	s.metrics.refusedStream(3, reasonRate)
	return false
}

// streamBudget refuses requests over their source's stream budget before anything
// else looks at them: HTTP/3 streams are reset with H3_REQUEST_REJECTED (no response
// is built), HTTP/1.1 and HTTP/2 get the prebuilt 429. No policy is evaluated.
func (s *Server) streamBudget(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := requestTime(w)
		peer := peerAddr(r)
		// A banned source's connections are closed when the ban starts; a request
		// racing that, or one forwarded by a trusted proxy for a banned client, is
		// refused here without a policy or a computed field.
		trusted := s.rules.Load().trusted
		banned := s.box.Banned(peer) || len(trusted) > 0 && s.box.Banned(clientAddr(r, trusted))
		// HTTP/3 streams were charged when h3Serve accepted them (admitH3Stream).
		if !banned && (r.ProtoMajor == 3 || s.guard.AllowStream(peer, now)) {
			next.ServeHTTP(w, r)
			return
		}
		if !banned {
			s.reject(r, now)
		}
		s.metrics.refusedStream(r.ProtoMajor, reasonRate)
		markRefused(w)
		if st, ok := w.(http3.HTTPStreamer); ok {
			if str, err := st.HTTPStream(); err == nil {
				str.CancelRead(quic.StreamErrorCode(http3.ErrCodeRequestRejected))
				str.CancelWrite(quic.StreamErrorCode(http3.ErrCodeRequestRejected))
				return
			}
		}
		h := w.Header()
		h["Content-Type"] = []string{"application/problem+json"}
		h["Retry-After"] = []string{"1"}
		w.WriteHeader(http.StatusTooManyRequests)
		w.Write(tooManyStreams)
	})
}

// boxBans shows the penalty box to the admin API.
type boxBans struct{ s *Server }

func toAdminBan(b penalty.Ban) adminBan {
	return adminBan{Prefix: b.Prefix, Until: b.Until, Reason: b.Reason, Strikes: b.Count}
}

func (b boxBans) List(now time.Time) []adminBan {
	bans := b.s.box.List(now)
	out := make([]adminBan, len(bans))
	for i, ban := range bans {
		out[i] = toAdminBan(ban)
	}
	return out
}

func (b boxBans) Add(_ context.Context, p netip.Prefix, now time.Time, d time.Duration, reason string) (adminBan, error) {
	ban := penalty.Ban{Prefix: p, Until: now.Add(d), Reason: reason}
	if err := b.s.box.Add(ban); err != nil {
		return adminBan{}, err
	}
	for _, x := range b.s.box.List(now) {
		if x.Prefix == p {
			return toAdminBan(x), nil
		}
	}
	return toAdminBan(ban), nil
}

func (b boxBans) Lift(_ context.Context, p netip.Prefix) (bool, error) {
	lifted := b.s.box.Lift(p)
	b.s.syncKernelBans()
	return lifted, nil
}

func (b boxBans) Counts() (active int, total uint64) {
	st := b.s.box.Stats()
	return st.Active, st.Total
}
