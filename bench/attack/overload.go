package attack

import (
	"context"
	"io"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

// heldRequest is how long each of overload's requests keeps its handler busy: the
// demo origin's /slow waits this long before it answers.
const heldRequest = 5 * time.Second

// overloadConn opens one HTTP/2 connection and keeps as many requests in flight on it
// as the server allows at once (its MaxConcurrentStreams, 100 on h3edge's defaults),
// each a GET of /slow that holds its handler for heldRequest; every answer is
// replaced by a new request at once. Many sources together hold more requests than
// the edge will carry: it is the goroutines and in-flight requests that grow, not
// any one source's budget.
func overloadConn(ctx context.Context, t *Target, src netip.Addr, rec *recorder) error {
	c, err := dialTLS(ctx, t, src, "h2", 0)
	if err != nil {
		return err
	}
	defer c.Close()
	cc, err := (&http2.Transport{}).NewClientConn(c)
	if err != nil {
		return err
	}
	defer cc.Close()
	done := rec.opened()
	defer done()
	start := time.Now()
	url := "https://" + t.Addr.String() + "/slow?ms=" + itoa(int(heldRequest/time.Millisecond))
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() {
			for ctx.Err() == nil && cc.CanTakeNewRequest() {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				rec.sent.Add(1)
				resp, err := cc.RoundTrip(req)
				if err != nil {
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				rec.response(resp.StatusCode)
				if resp.StatusCode != http.StatusOK {
					// Refused: come back after a pause, as a client told Retry-After would
					// sooner or later, not in a loop against loopback.
					select {
					case <-ctx.Done():
					case <-time.After(redialPause):
					}
				}
			}
		})
	}
	wg.Wait()
	rec.ended(ctx, time.Since(start))
	return nil
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
