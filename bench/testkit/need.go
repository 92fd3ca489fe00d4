package testkit

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// InCI reports whether a missing tool must fail a test instead of skipping it: CI=true,
// as .ci/run sets it, where every test must run.
func InCI() bool { return os.Getenv("CI") == "true" }

// Require skips the test when ok is false, or fails it under CI=true; what names what
// is missing ("taskset and two CPUs").
func Require(t T, what string, ok bool) {
	t.Helper()
	if ok {
		return
	}
	if InCI() {
		t.Fatalf("%s unavailable (CI=true: failing instead of skipping; .ci/run installs the tools)", what)
	}
	t.Skipf("%s unavailable (.ci/run installs the tools)", what)
}

// Need returns the path of the program name, from $PATH or else from the go command's
// $GOPATH/bin (where go install puts h2spec); if there is none it skips the test, or
// fails it under CI=true.
func Need(t T, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for dir := range strings.SplitSeq(strings.TrimSpace(string(out)), string(os.PathListSeparator)) {
			p := filepath.Join(dir, "bin", name)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
				return p
			}
		}
	}
	Require(t, name, false)
	return ""
}
