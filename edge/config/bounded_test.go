package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// validated parses, defaults and validates doc, and returns its problems.
func validated(t *testing.T, doc string) ValidationError {
	t.Helper()
	c, err := Parse("t.yaml", []byte(doc))
	if c == nil {
		t.Fatalf("Parse: %v", err)
	}
	c.ApplyDefaults()
	var ve ValidationError
	if err := c.Validate(); err != nil && !errors.As(err, &ve) {
		t.Fatalf("Validate: %T %v", err, err)
	}
	return ve
}

// TestConfigProblemsCounted: past maxProblems the problems are counted, not listed; the
// ones listed are the first in the file, whichever check found them.
func TestConfigProblemsCounted(t *testing.T) {
	var b strings.Builder
	b.WriteString("log_format: xml\ntrusted_proxies:\n")
	for i := range 200 {
		if i%2 == 0 {
			fmt.Fprintf(&b, "  - bad%d\n", i) // Validate's problem
		} else {
			b.WriteString("  - [x]\n") // Parse's problem
		}
	}
	b.WriteString("qouta: 1\n")
	ve := validated(t, b.String())
	if len(ve) != maxProblems+1 {
		t.Fatalf("%d lines, want %d problems and a count:\n%v", len(ve), maxProblems, ve)
	}
	// 1 log_format + 200 entries + 1 unknown field.
	if got, want := ve[maxProblems].Error(), fmt.Sprintf("… and %d more problems", 202-maxProblems); got != want {
		t.Errorf("last line %q, want %q", got, want)
	}
	if ve[0].Path != "log_format" || ve[1].Path != "trusted_proxies[0]" || ve[2].Path != "trusted_proxies[1]" ||
		ve[maxProblems-1].Path != fmt.Sprintf("trusted_proxies[%d]", maxProblems-2) {
		t.Errorf("not the first problems in file order: %v", ve)
	}
	_, err := Parse("t.yaml", []byte(b.String()))
	if ve, ok := err.(ValidationError); !ok || len(ve) != maxProblems+1 || ve[maxProblems].Problem != fmt.Sprintf("… and %d more problems", 101-maxProblems) {
		t.Errorf("Parse: %v", err)
	}
}

// TestConfigAfterBudget: the node budget stops what aliases repeat, not the file's own
// values: a value after the budget's worth of them is reported as it is.
func TestConfigAfterBudget(t *testing.T) {
	// 99 000 values repeated by aliases, then a bad one written out.
	var b strings.Builder
	b.WriteString("x: &k [ip" + strings.Repeat(", ip", 999) + "]\npolicies:\n")
	for i := range 99 {
		fmt.Fprintf(&b, "  - {name: p%d, quota: 1, window: 1s, key: *k}\n", i)
	}
	b.WriteString("trusted_proxies: [10.0.0.1, bogus]\n")
	ve := validated(t, b.String())
	want := `trusted_proxies[1]: must be a CIDR prefix such as 10.0.0.0/8, or an IP address (got "bogus")`
	if len(ve) != 2 || ve[0].Path != "x" || !strings.HasSuffix(ve[1].Error(), want) {
		t.Errorf("problems:\n%v\nwant x: unknown field and %s", ve, want)
	}

	// More values than the budget: every one is reported as it is, and counted.
	b.Reset()
	n := maxNodes + maxNodes/5
	b.WriteString("trusted_proxies: [")
	for range n {
		b.WriteString("a,")
	}
	b.WriteString("bogus]\n")
	ve = validated(t, b.String())
	if len(ve) != maxProblems+1 || ve[maxProblems].Problem != fmt.Sprintf("… and %d more problems", n+1-maxProblems) {
		t.Fatalf("%d problems, the last %v", len(ve), ve[len(ve)-1])
	}
	for _, e := range ve[:maxProblems] {
		if !strings.HasSuffix(e.Problem, `(got "a")`) {
			t.Errorf("problem %v, want got \"a\"", e)
		}
	}

	// Past the budget that aliases exhaust, the values not decoded are not reported.
	b.Reset()
	b.WriteString("x: &k [ip" + strings.Repeat(", ip", 999) + "]\npolicies:\n")
	for i := range 1000 {
		fmt.Fprintf(&b, "  - {name: p%d, quota: 1, window: 1s, key: *k}\n", i)
	}
	for _, e := range validated(t, b.String()) {
		if e.Path != "x" && !strings.Contains(e.Problem, "too many values") {
			t.Errorf("problem of a value the budget did not decode: %v", e)
		}
	}
}

// TestConfigFileTooLarge: a file past MaxFileSize is refused before it is parsed, in
// one line that names the file and the limit.
func TestConfigFileTooLarge(t *testing.T) {
	data := []byte("trusted_proxies: [" + strings.Repeat("a,", MaxFileSize/2) + "a]\n")
	_, err := Parse("t.yaml", data)
	want := "t.yaml: the file is larger than 256 KiB, the limit of a configuration file"
	if err == nil || err.Error() != want {
		t.Errorf("Parse: %v, want %s", err, want)
	}
	file := filepath.Join(t.TempDir(), "big.yaml")
	os.WriteFile(file, data, 0o644)
	if _, err := Load(file); err == nil || err.Error() != file+want[len("t.yaml"):] {
		t.Errorf("Load: %v", err)
	}
	ok := []byte("listen: \":8443\"\n" + strings.Repeat("#", MaxFileSize-17) + "\n")
	if c, err := Parse("t.yaml", ok); c == nil || err != nil {
		t.Errorf("a file of exactly MaxFileSize: %v", err)
	}
}

// TestConfigLongValueClipped: a huge value is quoted in a problem only in part.
func TestConfigLongValueClipped(t *testing.T) {
	long := strings.Repeat("x", 50000)
	ve := validated(t, fmt.Sprintf("listen: %s\ntrusted_proxies: [%s]\n%s: 1\n", long, long, long[:1000]))
	if len(ve) != 3 {
		t.Fatalf("problems: %v", ve)
	}
	for _, e := range ve {
		if len(e.Error()) > 400 {
			t.Errorf("a problem of %d bytes: %.200s…", len(e.Error()), e.Error())
		}
	}
}
