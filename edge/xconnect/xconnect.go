// Package xconnect turns on extended CONNECT (RFC 8441) in net/http's HTTP/2 server,
// so that the edge can carry WebSocket over HTTP/2.
//
// Go 1.27's HTTP/2 server sends SETTINGS_ENABLE_CONNECT_PROTOCOL, and accepts a
// request with :protocol, only when the GODEBUG environment variable holds
// http2xconnect=1 as net/http/internal/http2 initialises (golang/go#71128: off by
// default because handlers that hijack HTTP/1.1 connections cannot serve it). It is
// read from the environment in that package's init, not through internal/godebug, so
// neither a //go:debug line nor an http.Server field can set it.
//
// This package sets it from its own init. It imports nothing that imports net/http,
// and the Go specification (since Go 1.21) initialises, of the packages whose imports
// are done, the one first in import-path order: "github.com/h3edge/..." comes before
// "net/http/internal/http2", so this init runs first in every binary that links it.
// Restore puts the variable back once net/http is initialised, so that processes the
// edge starts do not inherit the setting.
//
// An operator's own GODEBUG=http2xconnect=0 is left alone.
package xconnect

import (
	"os"
	"strings"
)

const setting = "http2xconnect="

var (
	prior    string
	hadPrior bool
	set      bool // this init changed the environment
)

func init() {
	prior, hadPrior = os.LookupEnv("GODEBUG")
	if strings.Contains(prior, setting) {
		return // the operator chose
	}
	v := setting + "1"
	if prior != "" {
		v = prior + "," + v
	}
	set = os.Setenv("GODEBUG", v) == nil
}

// Enabled reports whether this package turned extended CONNECT on for HTTP/2, or the
// operator did with GODEBUG=http2xconnect=1.
func Enabled() bool {
	return set || strings.Contains(prior, setting+"1")
}

// Restore sets GODEBUG back to what the process started with. Call it from an init of
// a package that imports net/http (its HTTP/2 server has read the variable by then).
func Restore() {
	if !set {
		return
	}
	if hadPrior {
		os.Setenv("GODEBUG", prior)
	} else {
		os.Unsetenv("GODEBUG")
	}
}
