package main

import (
	"crypto/tls"
	"io"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestExtendedConnectSetting: the built binary's HTTP/2 server advertises
// SETTINGS_ENABLE_CONNECT_PROTOCOL (WebSocket over HTTP/2), which Go's net/http sends
// only when GODEBUG held http2xconnect=1 as it started — set by edge/xconnect's init,
// which must run before net/http's. An operator's GODEBUG=http2xconnect=0 wins, and
// the edge says so in its log.
func TestExtendedConnectSetting(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		want bool
	}{
		{"default", nil, true},
		{"operator's http2xconnect=0", []string{"GODEBUG=http2xconnect=0"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startProc(t, tc.env)
			if got := h2ConnectSetting(t, p.addr); got != tc.want {
				t.Errorf("SETTINGS_ENABLE_CONNECT_PROTOCOL advertised: %v, want %v", got, tc.want)
			}
			if warned := strings.Contains(p.log(), "WebSocket over HTTP/2 is off"); warned == tc.want {
				t.Errorf("the warning that WebSocket over HTTP/2 is off logged: %v, want %v\n%s", warned, !tc.want, p.log())
			}
		})
	}
}

// h2ConnectSetting reports whether the HTTP/2 server at addr sends
// SETTINGS_ENABLE_CONNECT_PROTOCOL = 1 in its first SETTINGS frame.
func h2ConnectSetting(t *testing.T, addr string) bool {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	fr.WriteSettings()
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			v, ok := sf.Value(http2.SettingEnableConnectProtocol)
			return ok && v == 1
		}
	}
}
