package config

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

// TestReadKeysProblemsBounded: a keys file of many bad entries lists the first ones and
// counts the rest, and so does one of many repeated keys.
func TestReadKeysProblemsBounded(t *testing.T) {
	var bad, dup bytes.Buffer
	for i := range 1000 {
		fmt.Fprintf(&bad, "k%d: [x]\n", i)
		fmt.Fprintf(&dup, "k: p%d\n", i)
	}
	for name, data := range map[string][]byte{"bad": bad.Bytes(), "repeated": dup.Bytes()} {
		_, err := ReadKeys(bytes.NewReader(data), "keys.yaml", func(key string) string { return key })
		var ve ValidationError
		if !errors.As(err, &ve) || len(ve) != maxProblems+1 {
			t.Fatalf("%s: %d problems, want %d and a count: %v", name, len(ve), maxProblems+1, err)
		}
		if got, want := ve[len(ve)-1].Problem, fmt.Sprintf("… and %d more problems", 1000-maxProblems-btoi(name == "repeated")); got != want {
			t.Errorf("%s: last line %q, want %q", name, got, want)
		}
		if ve[0].Line != 1+btoi(name == "repeated") {
			t.Errorf("%s: first problem %v", name, ve[0])
		}
	}
}
