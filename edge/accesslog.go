package edge

import (
	"fmt"
	"net/http"
	"time"

	"github.com/h3edge/h3edge/edge/accesslog"
	"github.com/h3edge/h3edge/edge/config"
	"github.com/h3edge/h3edge/edge/logsample"
	"github.com/h3edge/h3edge/edge/metrics"
)

// openAccessLog starts the access log of cfg (none without access_log:). Its dropped
// lines are counted in s.accessDropped, one count across the logs reloads open.
func (s *Server) openAccessLog(cfg *config.Config) (*accesslog.Log, error) {
	c := cfg.AccessLog
	if c == nil {
		return nil, nil
	}
	format := accesslog.JSON
	if c.Format == "common" {
		format = accesslog.Common
	}
	failLog := logsample.New(1)
	l, err := accesslog.Open(c.Path, c.Sample, accesslog.Config{Format: format, Dropped: &s.accessDropped,
		OnError: func(err error) {
			if ok, n := failLog.Allow(time.Now()); ok {
				s.log.Warn("access log write failed; its lines are dropped", "path", c.Path, "error", err, "suppressed", n)
			}
		}})
	if err != nil {
		return nil, cfg.Problem("access_log.path", fmt.Errorf("%w; give a file h3edge can create or append to", err))
	}
	return l, nil
}

// setAccessLog puts l in force and retires the one it replaces: it closes once the
// requests that began under it are logged.
func (s *Server) setAccessLog(l *accesslog.Log) {
	s.access.Swap(l).Retire()
}

// logAccess writes one line per request to the access log, when there is one and the
// request is sampled. It sits inside instrument, whose metrics.Recorder knows the
// status and the bytes, and it logs the request at now, instrument's instant;
// handlers further in add route, key and decision through
// accesslog.FromContext. Requests refused by the stream budget are not logged, as
// requests_total does not count them.
func (s *Server) logAccess(next step) step {
	return func(w http.ResponseWriter, r *http.Request, now time.Time) {
		al := s.access.Load()
		rec := metrics.RecorderOf(w)
		if al == nil || rec == nil || !al.Sampled() {
			next(w, r, now)
			return
		}
		// Held until the line is written: a reload that replaces the log meanwhile
		// closes it only after.
		for !al.Hold() { // retired by a reload just now: the one in force
			if al = s.access.Load(); al == nil {
				next(w, r, now)
				return
			}
		}
		defer al.Release()
		ctx, f := accesslog.NewContext(r.Context())
		r = r.WithContext(ctx)
		defer s.writeAccess(al, rec, r, now, f) // deferred: an aborted response is logged too
		next(w, r, now)
	}
}

// writeAccess logs r's line; now is when the request reached the edge's handler.
func (s *Server) writeAccess(al *accesslog.Log, rec *metrics.Recorder, r *http.Request, now time.Time, f *accesslog.Fields) {
	if rec.Refused() {
		return
	}
	e := accesslog.Entry{Time: now, Status: rec.Status(), Bytes: rec.Bytes(), Duration: time.Since(now),
		Client: s.clientPrefix(r), Fields: *f}
	e.SetRequest(r)
	al.Log(&e)
}

// accessFields returns the access-log fields of r's request, or nil when it is not
// logged. It looks in the context only while there is an access log.
func (s *Server) accessFields(r *http.Request) *accesslog.Fields {
	if s.access.Load() == nil {
		return nil
	}
	return accesslog.FromContext(r.Context())
}
