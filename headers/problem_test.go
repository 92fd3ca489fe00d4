package headers

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestProblemDocuments(t *testing.T) {
	tests := []struct {
		name string
		got  []byte
		want string
	}{
		{
			name: "quota exceeded",
			got:  AppendQuotaExceeded(nil, "Policy burst allows 100 requests per 60 seconds.", []string{"burst"}),
			want: `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"detail":"Policy burst allows 100 requests per 60 seconds.","violated-policies":["burst"]}`,
		},
		{
			name: "quota exceeded, two policies, no detail",
			got:  AppendQuotaExceeded(nil, "", []string{"burst", "daily"}),
			want: `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"violated-policies":["burst","daily"]}`,
		},
		{
			name: "quota exceeded, no policies",
			got:  AppendQuotaExceeded(nil, "x", nil),
			want: `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"detail":"x","violated-policies":[]}`,
		},
		{
			name: "temporary reduced capacity",
			got:  AppendTemporaryReducedCapacity(nil, "Quota lowered under load.", []string{"daily"}),
			want: `{"type":"https://iana.org/assignments/http-problem-types#temporary-reduced-capacity","title":"Service Unavailable","status":503,"detail":"Quota lowered under load.","violated-policies":["daily"]}`,
		},
		{
			name: "escaping",
			got:  AppendQuotaExceeded(nil, "a \"b\" \\ <c> & \n\t\x01 \xff \u2028", []string{`q"uote`}),
			want: `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"detail":"a \"b\" \\ \u003cc\u003e \u0026 \n\t\u0001 � \u2028","violated-policies":["q\"uote"]}`,
		},
		{
			name: "generic with defaults",
			got:  AppendProblem(nil, "", "", 502, "The origin did not answer."),
			want: `{"type":"about:blank","title":"Bad Gateway","status":502,"detail":"The origin did not answer."}`,
		},
		{
			name: "generic without detail",
			got:  AppendProblem(nil, "about:blank", "Gateway Timeout", 504, ""),
			want: `{"type":"about:blank","title":"Gateway Timeout","status":504}`,
		},
		{
			name: "generic 400",
			got:  AppendProblem([]byte{}, "https://h3edge.dev/problems/bad-request", "Bad Request", 400, "é"),
			want: `{"type":"https://h3edge.dev/problems/bad-request","title":"Bad Request","status":400,"detail":"é"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if string(tt.got) != tt.want {
				t.Errorf("got  %s\nwant %s", tt.got, tt.want)
			}
			if !json.Valid(tt.got) {
				t.Errorf("not valid JSON: %s", tt.got)
			}
		})
	}
}

func TestProblemRoundTrip(t *testing.T) {
	type doc struct {
		Type     string    `json:"type"`
		Title    string    `json:"title"`
		Status   int       `json:"status"`
		Detail   string    `json:"detail"`
		Violated *[]string `json:"violated-policies"`
	}
	detail := "client \"k\" over quota\\ <script>alert(1)</script> & \r\n\x00 é 😀"
	violated := []string{"burst", `we"ird\name`, "日本"}
	var got doc
	if err := json.Unmarshal(AppendQuotaExceeded(nil, detail, violated), &got); err != nil {
		t.Fatal(err)
	}
	want := doc{QuotaExceededType, "Too Many Requests", 429, detail, &violated}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip = %+v; want %+v", got, want)
	}

	got = doc{}
	if err := json.Unmarshal(AppendProblem(nil, "", "", 504, detail), &got); err != nil {
		t.Fatal(err)
	}
	want = doc{"about:blank", "Gateway Timeout", 504, detail, nil}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip = %+v; want %+v", got, want)
	}
}

func TestProblemAllocs(t *testing.T) {
	dst := make([]byte, 0, 512)
	violated := []string{"burst", "daily"}
	if n := testing.AllocsPerRun(100, func() { dst = AppendQuotaExceeded(dst[:0], "over quota", violated) }); n != 0 {
		t.Errorf("AppendQuotaExceeded allocates %v times per call, want 0", n)
	}
}
