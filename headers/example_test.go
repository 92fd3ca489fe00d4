package headers_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/h3edge/h3edge/headers"
)

func ExamplePolicyField() {
	v, err := headers.PolicyField([]headers.Policy{
		{Name: "burst", Quota: 100, Window: time.Minute},
		{Name: "daily", Quota: 1000, Window: 24 * time.Hour},
		{Name: "upload", Quota: 65535, Window: 10 * time.Second, Unit: headers.UnitContentBytes},
		{Name: "inflight", Quota: 10, Unit: headers.UnitConcurrentRequests},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(v)
	// Output:
	// "burst";q=100;w=60, "daily";q=1000;w=86400, "upload";q=65535;qu="content-bytes";w=10, "inflight";q=10;qu="concurrent-requests"
}

func ExampleAppendLimitField() {
	buf := make([]byte, 0, 128) // reused per response: no allocation
	buf = headers.AppendLimitField(buf[:0], []headers.Limit{
		{Name: "burst", Remaining: 42, Reset: 16*time.Second + 200*time.Millisecond},
		{Name: "daily", Remaining: 913, Reset: 80211 * time.Second},
		{Name: "inflight", Remaining: 3, Concurrency: true, PartitionKey: []byte{1, 2, 3, 4, 5, 6, 7, 8}},
	})
	fmt.Println(string(buf))
	// Output:
	// "burst";r=42;t=17, "daily";r=913;t=80211, "inflight";r=3;pk=:AQIDBAUGBwg=:
}

func ExampleRetryAfter() {
	denying := []headers.Limit{{Name: "dynamic", Remaining: 0, Reset: 40 * time.Second}}
	// The limiter thinks 20s would do, but the field says t=40: Retry-After follows t.
	d := headers.RetryAfter(denying, 20*time.Second)
	fmt.Println(string(headers.AppendRetryAfter(nil, d)))
	// Output:
	// 40
}

func ExampleAppendQuotaExceeded() {
	fmt.Println(string(headers.AppendQuotaExceeded(nil, "Policy burst allows 100 requests per minute.", []string{"burst"})))
	// Output:
	// {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"detail":"Policy burst allows 100 requests per minute.","violated-policies":["burst"]}
}

func ExampleAppendTemporaryReducedCapacity() {
	fmt.Println(string(headers.AppendTemporaryReducedCapacity(nil, "", []string{"daily"})))
	// Output:
	// {"type":"https://iana.org/assignments/http-problem-types#temporary-reduced-capacity","title":"Service Unavailable","status":503,"violated-policies":["daily"]}
}

func ExampleAppendProblem() {
	fmt.Println(string(headers.AppendProblem(nil, "", "", http.StatusGatewayTimeout, "The origin did not answer in 30s.")))
	// Output:
	// {"type":"about:blank","title":"Gateway Timeout","status":504,"detail":"The origin did not answer in 30s."}
}

func ExampleSetLegacy() {
	ls := []headers.Limit{
		{Name: "burst", Remaining: 42, Reset: 17 * time.Second},
		{Name: "daily", Remaining: 7, Reset: 80211 * time.Second},
	}
	quotas := []int64{100, 1000}
	h := http.Header{}
	if i := headers.Closest(ls); i >= 0 {
		headers.SetLegacy(h, quotas[i], ls[i])
	}
	fmt.Println(h.Get("X-RateLimit-Limit"), h.Get("X-RateLimit-Remaining"), h.Get("X-RateLimit-Reset"))
	// Output:
	// 1000 7 80211
}
