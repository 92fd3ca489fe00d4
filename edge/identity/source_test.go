package identity

import (
	"net/http/httptest"
	"testing"
)

func TestSource(t *testing.T) {
	r := httptest.NewRequest("GET", "https://api.example/?k=from-query", nil)
	r.Header.Set("X-Api-Key", "from-header")
	r.Header.Set("Authorization", "Bearer  from-token ")
	for _, tc := range []struct {
		entry, spelled, value string
		yields                bool
	}{
		{"header:x-api-key", "header:X-Api-Key", "from-header", true},
		{"header:X-Other", "header:X-Other", "", false},
		{"bearer", "bearer", "from-token", true},
		{"query:k", "query:k", "from-query", true},
		{"query:none", "query:none", "", false},
		{"ip", "ip", "", false}, // an address, hashed by Prefix
	} {
		src, ok := ParseSource(tc.entry)
		if !ok || src.String() != tc.spelled {
			t.Fatalf("ParseSource(%q) = %v, %v; want %s", tc.entry, src, ok, tc.spelled)
		}
		if v, ok := src.Value(r); v != tc.value || ok != tc.yields {
			t.Errorf("%s yields %q, %v; want %q, %v", tc.entry, v, ok, tc.value, tc.yields)
		}
	}
	if _, ok := ParseSource("cookie:session"); ok {
		t.Error("cookie:session parsed")
	}
}
