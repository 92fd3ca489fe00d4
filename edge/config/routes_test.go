package config

import (
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Size
		ok   bool
	}{
		{"0", 0, true}, {"1024", 1024, true}, {"64KiB", 64 << 10, true}, {"10MiB", 10 << 20, true},
		{"1GiB", 1 << 30, true}, {"2kB", 2000, true}, {"3MB", 3e6, true}, {"5B", 5, true},
		{"", 0, false}, {"MiB", 0, false}, {"1.5MiB", 0, false}, {"-1", 0, false}, {"+1", 0, false},
		{"10 MiB", 0, false}, {"10mib", 0, false}, {"99999999999TiB", 0, false}, {"9223372036854775807", 0, false},
	} {
		got, err := ParseSize(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestParseTarget(t *testing.T) {
	for _, tc := range []struct {
		in      string
		url     string
		weight  int
		problem string
	}{
		{"http://10.0.0.1:9000", "http://10.0.0.1:9000", 1, ""},
		{"h2c://[::1]:50051#w=3", "h2c://[::1]:50051", 3, ""},
		{"https://api.internal/", "https://api.internal", 1, ""},
		{"http://a:1/v1", "", 0, "no path"},
		{"http://a:1?x=1", "", 0, "no path or query"},
		{"http://a:1#w=1001", "", 0, "weight"},
		{"http://a:1#weight=2", "", 0, "weight"},
		{"http://a:0", "", 0, "port"},
		{"a:1", "", 0, "absolute"},
	} {
		got, err := ParseTarget(tc.in)
		if tc.problem != "" {
			if err == nil || !strings.Contains(err.Error(), tc.problem) {
				t.Errorf("ParseTarget(%q): error %v, want one saying %q", tc.in, err, tc.problem)
			}
			continue
		}
		if err != nil || got.URL.String() != tc.url || got.Weight != tc.weight {
			t.Errorf("ParseTarget(%q) = %v, %d, %v; want %s, %d", tc.in, got.URL, got.Weight, err, tc.url, tc.weight)
		}
	}
}

func TestShadows(t *testing.T) {
	for _, tc := range []struct {
		a, b RouteMatch
		want bool
	}{
		{RouteMatch{}, RouteMatch{PathPrefix: "/x"}, true},
		{RouteMatch{PathPrefix: "/api/"}, RouteMatch{PathPrefix: "/api/v1/"}, true},
		{RouteMatch{PathPrefix: "/api/v1/"}, RouteMatch{PathPrefix: "/api/"}, false},
		{RouteMatch{Host: "*.example.com"}, RouteMatch{Host: "a.example.com"}, true},
		{RouteMatch{Host: "*.example.com"}, RouteMatch{Host: "*.b.example.com"}, true},
		{RouteMatch{Host: "*.example.com"}, RouteMatch{Host: "example.com"}, false},
		{RouteMatch{Host: "a.example.com"}, RouteMatch{}, false},
		{RouteMatch{Methods: []string{"GET", "POST"}}, RouteMatch{Methods: []string{"GET"}}, true},
		{RouteMatch{Methods: []string{"GET"}}, RouteMatch{Methods: []string{"GET", "POST"}}, false},
		{RouteMatch{Methods: []string{"GET"}}, RouteMatch{}, false},
		{RouteMatch{Headers: map[string]string{"X-Tenant": "a"}}, RouteMatch{Headers: map[string]string{"x-tenant": "a", "Y": "b"}}, true},
		{RouteMatch{Headers: map[string]string{"X-Tenant": "a"}}, RouteMatch{Headers: map[string]string{"X-Tenant": "b"}}, false},
	} {
		if got := Shadows(tc.a, tc.b); got != tc.want {
			t.Errorf("Shadows(%+v, %+v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

// FuzzParseSize: ParseSize never panics, and what it accepts is non-negative and
// printed back in bytes it reads the same.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"0", "64KiB", "10MiB", "1GB", "1.5MiB", "-1", "99999999999999999999", "MiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err != nil {
			return
		}
		if n < 0 {
			t.Fatalf("ParseSize(%q) = %d", s, n)
		}
	})
}

// FuzzParseTarget: ParseTarget never panics, and a target it accepts has a scheme of
// targetSchemes, a host, no path and a weight in range.
func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{"http://a:1", "h2c://[::1]:2#w=3", "https://x/", "http://a/b", "http://a#w=", "%zz", "http://[::1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tg, err := ParseTarget(s)
		if err != nil {
			return
		}
		if tg.URL.Host == "" || tg.URL.Path != "" || tg.Weight < 1 || tg.Weight > maxWeight {
			t.Fatalf("ParseTarget(%q) = %+v", s, tg)
		}
	})
}
