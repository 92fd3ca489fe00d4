package headers

import "testing"

func TestGRPCMessage(t *testing.T) {
	for in, want := range map[string]string{
		"quota exceeded for policy burst": "quota exceeded for policy burst",
		"100% done":                       "100%25 done",
		"línea\n":                         "l%C3%ADnea%0A",
	} {
		if got := GRPCMessage(in); got != want {
			t.Errorf("GRPCMessage(%q) = %q, want %q", in, got, want)
		}
	}
}
