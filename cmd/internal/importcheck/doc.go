// Package importcheck holds no code, only a test: TestModuleImports runs go list over
// the module and fails when an import breaks the package table of DESIGN.md §2 (which
// package may import which, and which third-party modules). The table itself is in
// rules_test.go; `go test ./cmd/internal/importcheck` runs the check alone.
package importcheck
