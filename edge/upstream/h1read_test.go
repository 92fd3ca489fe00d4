package upstream

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// apiResponse is a response as a Go origin answers an API request.
const apiResponse = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nDate: Wed, 02 Dec 2026 01:00:00 GMT\r\n" +
	"Ratelimit: \"a\";r=5\r\nX-Request-Id: 42\r\nContent-Length: 17\r\n\r\n{\"hello\":\"world\"}"

// readBoth reads data as a response to method, once with readResponse and once with
// http.ReadResponse, each with its body read to its end, and fails t where they
// differ: the response, the body and its error, and what is left for the next response.
func readBoth(t *testing.T, data []byte, method string) (parsed bool) {
	t.Helper()
	req := &http.Request{Method: method}
	read := func(f func(*bufio.Reader, *http.Request) (*http.Response, error)) (*http.Response, []byte, error, error, int) {
		br := bufio.NewReaderSize(bytes.NewReader(data), 4<<10)
		resp, err := f(br, req)
		if err != nil {
			return nil, nil, nil, err, 0
		}
		body, berr := io.ReadAll(resp.Body)
		rest, _ := io.ReadAll(br)
		return resp, body, berr, nil, len(rest)
	}
	want, wantBody, wantBodyErr, wantErr, wantRest := read(http.ReadResponse)
	got, gotBody, gotBodyErr, gotErr, gotRest := read(readResponse)
	if (wantErr == nil) != (gotErr == nil) || wantErr != nil && wantErr.Error() != gotErr.Error() {
		t.Fatalf("%q: error %v, http.ReadResponse's %v", data, gotErr, wantErr)
	}
	if wantErr != nil {
		return false
	}
	_, pr := parseResponse(data[:min(len(data), 4<<10)])
	isParsed := pr != nil && method != http.MethodHead
	for _, r := range []*http.Response{want, got} {
		r.Body = nil
	}
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("%q:\n got %+v\nwant %+v", data, got, want)
	}
	if !bytes.Equal(wantBody, gotBody) || !errors.Is(gotBodyErr, wantBodyErr) && (wantBodyErr == nil || gotBodyErr == nil || gotBodyErr.Error() != wantBodyErr.Error()) || wantRest != gotRest {
		t.Fatalf("%q: body %q (%v), %d left; http.ReadResponse's %q (%v), %d left", data, gotBody, gotBodyErr, gotRest, wantBody, wantBodyErr, wantRest)
	}
	return isParsed
}

// TestReadResponse: the responses parseResponse reads in place read as
// http.ReadResponse reads them, and the others are left to it.
func TestReadResponse(t *testing.T) {
	for _, c := range []struct {
		data   string
		method string
		parsed bool
	}{
		{apiResponse, "GET", true},
		{apiResponse + "HTTP/1.1 200 OK\r\n", "GET", true}, // the next response stays in the buffer
		{"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nx-a:  1 \r\nX-A:\t2\r\n\r\n", "POST", true},
		{"HTTP/1.1 200\r\nContent-Length: 3\r\n\r\nabc", "GET", true},
		{"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", "GET", true}, // cut short: ErrUnexpectedEOF
		{apiResponse, "HEAD", false},
		{"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n", "GET", false},
		{"HTTP/1.1 304 Not Modified\r\n\r\n", "GET", false},
		{"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + apiResponse, "GET", false},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "GET", false},
		{"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc", "GET", false},
		{"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc", "GET", false},
		{"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", "GET", false}, // an error
		{"HTTP/1.1 200 OK\r\nPragma: no-cache\r\nContent-Length: 0\r\n\r\n", "GET", false},
		{"HTTP/1.1 200 OK\r\n\r\nto the close", "GET", false},
		{"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nabc", "GET", false},
		{"HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 0\r\n\r\n", "GET", false}, // folded
		{"HTTP/1.1 200 OK\r\nBad Name: a\r\nContent-Length: 0\r\n\r\n", "GET", false},
		{"HTTP/1.1 200 OK\nContent-Length: 0\n\n", "GET", false},
		{"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "GET", false},
		{"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n", "GET", false},
		{"HTTP/1.1 200 OK\r\nContent-Len", "GET", false},
		{"", "GET", false},
	} {
		if got := readBoth(t, []byte(c.data), c.method); got != c.parsed {
			t.Errorf("%q: parsed in place %v, want %v", c.data, got, c.parsed)
		}
	}
}

func FuzzReadResponse(f *testing.F) {
	f.Add([]byte(apiResponse), false)
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-A: 1\r\nx-a: 2\r\n\r\nabcHTTP/1.1"), false)
	f.Add([]byte("HTTP/1.1 404 \r\nContent-Length: 1\r\nA:\x80\r\n\r\nz"), true)
	f.Fuzz(func(t *testing.T, data []byte, head bool) {
		method := "GET"
		if head {
			method = "HEAD"
		}
		readBoth(t, data, method)
	})
}

// BenchmarkReadResponse: an API origin's response, read by readResponse and by
// http.ReadResponse.
func BenchmarkReadResponse(b *testing.B) {
	for _, c := range []struct {
		name string
		read func(*bufio.Reader, *http.Request) (*http.Response, error)
	}{{"inplace", readResponse}, {"net-http", http.ReadResponse}} {
		b.Run(c.name, func(b *testing.B) {
			req := &http.Request{Method: "GET"}
			sr := strings.NewReader(apiResponse)
			br := bufio.NewReaderSize(sr, 4<<10)
			b.ReportAllocs()
			for b.Loop() {
				sr.Reset(apiResponse)
				br.Reset(sr)
				resp, err := c.read(br, req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
			}
		})
	}
}
