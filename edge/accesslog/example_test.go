package accesslog_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/h3edge/h3edge/edge/accesslog"
)

// A handler further in the chain fills the request's fields; the access log's
// middleware writes them with the rest of the line once the response has ended.
func ExampleNewContext() {
	ctx, f := accesslog.NewContext(context.Background())
	// ... in the proxy, with the request's context:
	if f := accesslog.FromContext(ctx); f != nil {
		f.Route, f.Upstream, f.Target = "api", "api-pool", "http://10.0.0.1:9000"
	}
	e := accesslog.Entry{Time: time.Date(2026, 12, 1, 18, 30, 0, 0, time.UTC), Proto: "HTTP/3.0", Method: "GET",
		Host: "api.example.com", Path: "/v1/items", Status: 200, Bytes: 512, Duration: 2 * time.Millisecond,
		Client: netip.MustParsePrefix("203.0.113.7/32"), Fields: *f}
	os.Stdout.Write(accesslog.AppendJSON(nil, &e))
	os.Stdout.Write(accesslog.AppendCommon(nil, &e))
	fmt.Println(accesslog.FromContext(context.Background()) == nil)
	// Output:
	// {"time":"2026-12-01T18:30:00.000Z","proto":"HTTP/3.0","method":"GET","host":"api.example.com","path":"/v1/items","status":200,"bytes":512,"duration_ms":2.000,"route":"api","upstream":"api-pool","target":"http://10.0.0.1:9000","client":"203.0.113.7/32","key":"","decision":""}
	// 203.0.113.7/32 - - [01/Dec/2026:18:30:00 +0000] "GET /v1/items HTTP/3.0" 200 512
	// true
}
