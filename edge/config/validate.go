package config

import (
	"cmp"
	"crypto/sha256"
	"fmt"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// FieldError is one problem of a configuration, placed in its file when the value
// came from one.
type FieldError struct {
	File      string // "" when the value did not come from a file (a flag, a default)
	Line, Col int    // 1-based; 0 when unknown
	Path      string // the field, such as "policies[1].quota"; "" for the whole file
	Problem   string // what is wrong and what to do
	Err       error  // the error Problem says, if any (Unwrap)
}

// Unwrap returns Err.
func (e FieldError) Unwrap() error { return e.Err }

// Problem returns err as the problem of the field at path, placed in c's file where the
// file has it (the place of the nearest enclosing path, as Validate's): what a reload
// refuses after validation (a restart-only field, a file that cannot be opened) names
// file and line as the validator's problems do.
func (c *Config) Problem(path string, err error) FieldError {
	e := FieldError{Path: path, Problem: err.Error(), Err: err}
	if c.parsed != nil && Same(c, c.parsed, path) {
		if at := c.place(path); at.line > 0 {
			e.File, e.Line, e.Col = c.File, at.line, at.col
			return e
		}
	}
	e.File = c.File
	return e
}

// Error formats the problem as "FILE:LINE:COL: field.path: problem", leaving out the
// parts that are not known.
func (e FieldError) Error() string {
	var b strings.Builder
	if e.Line > 0 {
		if e.File != "" {
			b.WriteString(e.File + ":")
		}
		fmt.Fprintf(&b, "%d:%d: ", e.Line, e.Col)
	} else if e.File != "" {
		b.WriteString(e.File + ": ")
	}
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Problem)
	return b.String()
}

// ValidationError lists every problem of a configuration, in file order. Its Error
// is one FieldError per line.
type ValidationError []FieldError

func (e ValidationError) Error() string {
	lines := make([]string, len(e))
	for i, fe := range e {
		lines[i] = fe.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the FieldErrors, for errors.As.
func (e ValidationError) Unwrap() []error {
	errs := make([]error, len(e))
	for i, fe := range e {
		errs[i] = fe
	}
	return errs
}

// sorted returns errs as a ValidationError in file order; problems without a place
// come last, in the order found.
func sorted(errs []FieldError) ValidationError {
	slices.SortStableFunc(errs, func(a, b FieldError) int {
		if (a.Line == 0) != (b.Line == 0) {
			if a.Line == 0 {
				return 1
			}
			return -1
		}
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Col, b.Col))
	})
	return ValidationError(errs)
}

// maxProblems bounds the problems one ValidationError lists: a file with a million bad
// values is told in as many lines as one with fifty, and the rest are counted.
const maxProblems = 50

// problemList keeps the first maxProblems problems in file order and counts the others,
// so that collecting them costs memory for maxProblems only, however many there are.
type problemList struct {
	errs []FieldError
	more int // problems found beyond errs
	// last is the place of the last problem kept once maxProblems are: a problem
	// placed after it will not be listed.
	last *position
}

func (l *problemList) add(e FieldError) {
	if l.beyond(position{e.Line, e.Col}) {
		l.more++
		return
	}
	l.errs = append(l.errs, e)
	if len(l.errs) >= 4*maxProblems {
		l.trim()
	}
}

// beyond reports whether a problem placed at p (line 0: without a place) would be
// left out of the list: whether maxProblems come before it already.
func (l *problemList) beyond(p position) bool {
	if l.last == nil {
		return false
	}
	if (p.line == 0) != (l.last.line == 0) {
		return p.line == 0
	}
	return cmp.Or(cmp.Compare(p.line, l.last.line), cmp.Compare(p.col, l.last.col)) >= 0
}

// trim sorts the problems and drops all but the first maxProblems, counting them.
func (l *problemList) trim() {
	sorted(l.errs)
	if n := len(l.errs) - maxProblems; n >= 0 {
		clear(l.errs[maxProblems:]) // let their strings go
		l.errs, l.more = l.errs[:maxProblems], l.more+n
		e := l.errs[maxProblems-1]
		l.last = &position{e.Line, e.Col}
	}
}

// clone returns a copy to add more problems to.
func (l *problemList) clone() problemList {
	return problemList{errs: slices.Clone(l.errs), more: l.more}
}

// err returns the problems as a ValidationError in file order, the count of those left
// out as its last line; nil if there are none.
func (l *problemList) err() error {
	l.trim()
	if len(l.errs) == 0 {
		return nil
	}
	ve := slices.Clone(ValidationError(l.errs))
	if l.more > 0 {
		ve = append(ve, FieldError{Problem: fmt.Sprintf("… and %d more problems", l.more)})
	}
	return ve
}

// maxQuoted bounds a value quoted in a problem, so a huge value gives a short line.
const maxQuoted = 128

// clip shortens s to about maxQuoted bytes, at a character boundary.
func clip(s string) string {
	if len(s) <= maxQuoted {
		return s
	}
	i := maxQuoted - 3
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "..."
}

// Validate reports every problem of the configuration at once, as a ValidationError:
// Parse's decode problems again and each value out of range or inconsistent with
// another; the first 50 in file order, and a last line that counts the others. Call it after ApplyDefaults: it checks the values as they
// are, and a zero that has a default is not valid. Validate reads no file: see
// ValidateFiles.
func (c *Config) Validate() error {
	return c.report(c.problems())
}

// ValidateFiles reads the files the configuration names for their content,
// tls.acme.ca_roots and keys.file, and reports their problems as a ValidationError placed in those files (a repeated
// key with the line it is already set on); an error reading one as it is. Validate
// reads no file; h3edge validate calls both, and the server reads keys.file itself
// when it starts and reloads.
func (c *Config) ValidateFiles() error {
	if err := c.validateACMEFiles(); err != nil {
		return err
	}
	if c.Keys == nil || c.Keys.File == "" {
		return nil
	}
	f, err := os.Open(c.Keys.File)
	if err != nil {
		return fmt.Errorf("keys.file: %w", err)
	}
	defer f.Close()
	_, err = ReadKeys(f, c.Keys.File, func(key string) [sha256.Size]byte { return sha256.Sum256([]byte(key)) })
	return err
}

// report returns Parse's decode problems and those of k, placed in
// the file and sorted, as a ValidationError; nil if there are none.
func (c *Config) report(k checker) error {
	l := c.decodeErrs.clone()
	for _, e := range k.list.errs {
		l.add(e)
	}
	l.more += k.list.more
	return l.err()
}

// isShadowed tells whether a problem at path only echoes a decode problem, such as
// "quota: required" after "qouta: unknown field": whether path or a path that holds it
// is shadowed.
func (c *Config) isShadowed(path string) bool {
	for p := path; p != ""; p = parentPath(p) {
		if c.shadowed[p] {
			return true
		}
	}
	return false
}

// place returns where the file has path, or the nearest path that holds it; line 0 if
// nowhere. Unlike locate it does not check that the value is still the file's.
func (c *Config) place(path string) position {
	for p := path; p != ""; p = parentPath(p) {
		if at, ok := c.pos[p]; ok {
			return at
		}
	}
	return position{}
}

// locate places e in the file: at its path, or the nearest enclosing one the file has,
// but only while the value there is still the file's (a flag may have replaced it).
func (c *Config) locate(e FieldError) FieldError {
	if c.parsed == nil || e.Path == "" {
		return e
	}
	if !Same(c, c.parsed, e.Path) {
		return e
	}
	for p := e.Path; p != ""; p = parentPath(p) {
		if at, ok := c.pos[p]; ok {
			e.File, e.Line, e.Col = c.File, at.line, at.col
			return e
		}
	}
	return e
}

// Same reports whether a and b hold equal values at path, a setting's YAML path such as
// "redis.url" or "policies[0].quota", NaN equal to NaN; where neither has the path (a
// nil pointer on the way, an index out of range) they are the same.
func Same(a, b *Config, path string) bool {
	return same(valueAt(reflect.ValueOf(a), path), valueAt(reflect.ValueOf(b), path))
}

// same reports whether a and b hold equal values, NaN equal to NaN.
func same(a, b reflect.Value) bool {
	if !a.IsValid() || !b.IsValid() {
		return a.IsValid() == b.IsValid()
	}
	if a.Kind() == reflect.Float64 && b.Kind() == reflect.Float64 && math.IsNaN(a.Float()) && math.IsNaN(b.Float()) {
		return true
	}
	return reflect.DeepEqual(a.Interface(), b.Interface())
}

// parentPath returns "policies[1]" for "policies[1].quota" and "policies" for
// "policies[1]".
func parentPath(p string) string {
	if strings.HasSuffix(p, "]") {
		return p[:strings.LastIndexByte(p, '[')]
	}
	if i := strings.LastIndexByte(p, '.'); i >= 0 {
		return p[:i]
	}
	return ""
}

// valueAt returns the field at path below v, such as "tls.certificates[0].cert";
// the zero Value if there is none (a nil pointer on the way, an index out of range).
func valueAt(v reflect.Value, path string) reflect.Value {
	for {
		for v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return reflect.Value{}
			}
			v = v.Elem()
		}
		if path == "" {
			return v
		}
		if path[0] == '[' {
			end := strings.IndexByte(path, ']')
			if end < 0 || v.Kind() != reflect.Slice {
				return reflect.Value{}
			}
			i, err := strconv.Atoi(path[1:end])
			if err != nil || i < 0 || i >= v.Len() {
				return reflect.Value{}
			}
			v, path = v.Index(i), path[end+1:]
			continue
		}
		path = strings.TrimPrefix(path, ".")
		name := path
		if i := strings.IndexAny(path, ".["); i >= 0 {
			name = path[:i]
		}
		if v.Kind() == reflect.Map && v.Type().Key().Kind() == reflect.String {
			e := v.MapIndex(reflect.ValueOf(name).Convert(v.Type().Key()))
			if !e.IsValid() {
				return reflect.Value{}
			}
			v, path = e, path[len(name):]
			continue
		}
		if v.Kind() != reflect.Struct {
			return reflect.Value{}
		}
		_, index := yamlFields(v.Type())
		f, ok := index[name]
		if !ok {
			return reflect.Value{}
		}
		v, path = v.Field(f), path[len(name):]
	}
}

// The enumerations of DESIGN.md §4.
const (
	algTokenBucket = "token_bucket"
	algLeakyBucket = "leaky_bucket"
	algConcurrency = "concurrency"
	unitRequests   = "requests"
	unitConcurrent = "concurrent-requests"
	scopeGlobal    = "global"
	scopeLocal     = "local"
	keyIP          = "ip"
)

var (
	algorithms      = []string{algTokenBucket, "gcra", "fixed_window", "sliding_window", "sliding_log", algLeakyBucket, algConcurrency}
	units           = []string{unitRequests, "content-bytes", unitConcurrent}
	scopes          = []string{scopeGlobal, scopeLocal}
	storeFailures   = []string{"open", "closed", "local"}
	modes           = []string{"enforce", "shadow"}
	logFormats      = []string{"text", "json"}
	accessFormats   = []string{"json", "common"}
	redisSchemes    = []string{"redis", "rediss"}
	upstreamSchemes = []string{"http", "https"}
)

// checker collects problems, each with its path, placed in c's file; it leaves out
// those that only echo a decode problem, and keeps no more than a problemList does.
type checker struct {
	c    *Config
	list problemList
}

func (k *checker) add(path, format string, args ...any) {
	if k.c.isShadowed(path) {
		return
	}
	if k.list.beyond(k.c.place(path)) { // not listed: spare the formatting and locate
		k.list.more++
		return
	}
	for i, a := range args {
		if s, ok := a.(string); ok {
			args[i] = clip(s)
		}
	}
	k.addError(FieldError{Path: path, Problem: fmt.Sprintf(format, args...)})
}

func (k *checker) addError(e FieldError) {
	if k.c.isShadowed(e.Path) {
		return
	}
	k.list.add(k.c.locate(e))
}

// enum checks that v is one of values.
func (k *checker) enum(path, what, v string, values []string) {
	if !slices.Contains(values, v) {
		k.add(path, "unknown %s %q; use one of %s", what, v, strings.Join(values, ", "))
	}
}

// between checks lo <= v <= hi.
func (k *checker) between(path string, v, lo, hi int) {
	if v < lo || v > hi {
		k.add(path, "must be from %d to %d (got %d)", lo, hi, v)
	}
}

// duration checks 0 < v <= hi.
func (k *checker) duration(path string, v, hi time.Duration) {
	switch {
	case v <= 0:
		k.add(path, "must be more than 0, a duration such as 10s (got %s)", v)
	case v > hi:
		k.add(path, "must be at most %s (got %s)", short(hi), v)
	}
}

// problems checks every value; Validate places the problems in the file.
func (c *Config) problems() checker {
	k := checker{c: c}

	if p := hostPortProblem(c.Listen, true); p != "" {
		k.add("listen", `%s, such as ":8443" or "127.0.0.1:8443" (got %q)`, p, c.Listen)
	}
	if c.AltSvc != nil && *c.AltSvc != "" && (!strings.Contains(*c.AltSvc, "=") || hasControl(*c.AltSvc)) {
		k.add("alt_svc", `must be an Alt-Svc field value such as 'h3=":8443"; ma=86400', or "" to send none (got %q)`, *c.AltSvc)
	}
	k.duration("shutdown_timeout", c.ShutdownTimeout, 10*time.Minute)
	k.duration("upstream_timeout", c.UpstreamTimeout, 10*time.Minute)
	if c.Upstream != "" {
		k.url("upstream", c.Upstream, upstreamSchemes, "http://127.0.0.1:9000")
	}
	for i, s := range c.TrustedProxies {
		if _, ok := ParsePrefix(s); !ok {
			k.add(fmt.Sprintf("trusted_proxies[%d]", i), "must be a CIDR prefix such as 10.0.0.0/8, or an IP address (got %q)", s)
		}
	}
	for i, pair := range c.TLS.Certificates {
		path := fmt.Sprintf("tls.certificates[%d]", i)
		if pair.Cert == "" {
			k.add(path+".cert", "required: the path of a PEM certificate chain")
		}
		if pair.Key == "" {
			k.add(path+".key", "required: the path of the PEM private key")
		}
	}
	c.checkACME(&k)
	c.checkRedis(&k)
	c.checkAdmin(&k)
	c.checkIP(&k)
	if c.Keys != nil {
		if c.Keys.File != "" && c.Keys.RedisHash != "" {
			k.add("keys.redis_hash", "set either keys.file or keys.redis_hash, not both")
		} else if c.Keys.RedisHash != "" && c.Redis == nil {
			k.add("keys.redis_hash", "needs redis: configure redis.url, redis.cluster or redis.sentinel, or use keys.file")
		}
	}
	names := map[string]int{}
	for i := range c.Policies {
		c.checkPolicy(&k, i, names)
	}
	c.checkRoutes(&k)
	a := c.Abuse
	if a.Rejections <= 0 {
		k.add("abuse.rejections", "must be more than 0 (got %d)", a.Rejections)
	}
	k.duration("abuse.within", a.Within, 24*time.Hour)
	k.duration("abuse.ban", a.Ban, 30*24*time.Hour)
	k.duration("abuse.max_ban", a.MaxBan, 30*24*time.Hour)
	if a.Ban > 0 && a.MaxBan > 0 && a.Ban > a.MaxBan {
		k.add("abuse.ban", "must be at most abuse.max_ban (%s); raise max_ban or lower ban", short(a.MaxBan))
	}
	c.Limits.check(&k, "limits")
	k.enum("log_format", "log format", c.LogFormat, logFormats)
	c.checkAccessLog(&k)
	return k
}

func (c *Config) checkAccessLog(k *checker) {
	l := c.AccessLog
	if l == nil {
		return
	}
	k.enum("access_log.format", "access log format", l.Format, accessFormats)
	if !(l.Sample > 0 && l.Sample <= 1) { // NaN too
		k.add("access_log.sample", "must be more than 0 and at most 1, the fraction of requests logged (got %v)", l.Sample)
	}
	if l.Path == "stdout" {
		return
	}
	if fi, err := os.Stat(l.Path); err == nil && fi.IsDir() {
		k.add("access_log.path", "must be a file or stdout, not a directory (got %q)", l.Path)
	} else if dir := filepath.Dir(l.Path); err != nil {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			k.add("access_log.path", "the directory %q does not exist: create it, or write to stdout", dir)
		}
	}
}

func (c *Config) checkRedis(k *checker) {
	r := c.Redis
	if r == nil {
		return
	}
	switch n := btoi(r.URL != "") + btoi(len(r.Cluster) > 0) + btoi(r.Sentinel != nil); {
	case n == 0:
		k.add("redis", "set one of url, cluster or sentinel")
	case n > 1:
		k.add("redis", "set only one of url, cluster and sentinel")
	}
	if r.URL != "" {
		if k.url("redis.url", r.URL, redisSchemes, "redis://127.0.0.1:6379/0") {
			u, _ := url.Parse(r.URL)
			if db := strings.TrimPrefix(u.Path, "/"); db != "" && !isDigits(db) {
				k.add("redis.url", "the path must be a database number such as /0 (got %q)", u.Path)
			}
		}
		if r.Username != "" {
			k.add("redis.username", "applies to cluster and sentinel; with url, put it in the url (redis://user:password@host:6379/0)")
		}
		if r.Password != "" {
			k.add("redis.password", "applies to cluster and sentinel; with url, put it in the url (redis://user:password@host:6379/0)")
		}
		if r.TLS {
			k.add("redis.tls", "applies to cluster and sentinel; with url, use a rediss:// url instead")
		}
	}
	for i, a := range r.Cluster {
		if p := hostPortProblem(a, false); p != "" {
			k.add(fmt.Sprintf("redis.cluster[%d]", i), "%s, such as 10.0.0.1:6379 (got %q)", p, a)
		}
	}
	if s := r.Sentinel; s != nil {
		if s.Master == "" {
			k.add("redis.sentinel.master", "required: the name of the master set, such as mymaster")
		}
		if len(s.Addrs) == 0 {
			k.add("redis.sentinel.addrs", "required: the sentinels' addresses, such as [10.0.0.5:26379]")
		}
		for i, a := range s.Addrs {
			if p := hostPortProblem(a, false); p != "" {
				k.add(fmt.Sprintf("redis.sentinel.addrs[%d]", i), "%s, such as 10.0.0.5:26379 (got %q)", p, a)
			}
		}
	}
	k.duration("redis.timeout", r.Timeout, 5*time.Second)
}

func (c *Config) checkAdmin(k *checker) {
	a := c.Admin
	if a.Listen == "off" {
		return
	}
	if p := hostPortProblem(a.Listen, true); p != "" {
		k.add("admin.listen", `%s, such as "127.0.0.1:9090", or "off" (got %q)`, p, a.Listen)
		return
	}
	host, port, _ := net.SplitHostPort(a.Listen)
	if !isLoopback(host) && a.Token == "" {
		k.add("admin.token", "required when admin.listen is not a loopback address: set a long random token, or listen on 127.0.0.1")
	}
	if lhost, lport, err := net.SplitHostPort(c.Listen); err == nil && lport == port && port != "0" &&
		(host == "" || lhost == "" || host == lhost) {
		k.add("admin.listen", "must not be the public listen address; the admin API has its own port")
	}
}

func (c *Config) checkIP(k *checker) {
	ip := c.IP
	for _, r := range []struct {
		path string
		Rate
	}{{"ip.connections", ip.Connections}, {"ip.streams", ip.Streams}} {
		if !(r.Rate.Rate > 0 && r.Rate.Rate <= maxRate) { // NaN too
			k.add(r.path+".rate", "must be more than 0 and at most %d per second (got %v)", int(maxRate), r.Rate.Rate)
			if r.Burst == 0 {
				continue // not defaulted because of the rate: one problem is enough
			}
		}
		k.between(r.path+".burst", r.Burst, 1, 10*maxRate)
	}
	k.between("ip.max_connections", ip.MaxConnections, 1, 1000000)
	k.between("ip.max_streams_per_connection", ip.MaxStreamsPerConnection, 1, 65535)
	k.between("ip.retry_above", ip.RetryAbove, 1, 10000000)
	k.between("ip.max_tracked", ip.MaxTracked, 1, 100000000)
	k.between("ip.ipv4_prefix", ip.IPv4Prefix, 8, 32)
	k.between("ip.ipv6_prefix", ip.IPv6Prefix, 16, 128)
}

func (c *Config) checkPolicy(k *checker, i int, names map[string]int) {
	p := c.Policies[i]
	path := fmt.Sprintf("policies[%d]", i)
	k.name(path, "policies", i, p.Name, names, "the policy's name in the RateLimit fields, such as burst")
	k.enum(path+".algorithm", "algorithm", p.Algorithm, algorithms)
	k.enum(path+".unit", "unit", p.Unit, units)
	if slices.Contains(algorithms, p.Algorithm) && slices.Contains(units, p.Unit) {
		switch {
		case p.Algorithm == algConcurrency && p.Unit != unitConcurrent:
			k.add(path+".unit", "must be %s with the %s algorithm", unitConcurrent, algConcurrency)
		case p.Algorithm != algConcurrency && p.Unit == unitConcurrent:
			k.add(path+".algorithm", "must be %s with unit %s", algConcurrency, unitConcurrent)
		}
	}
	switch {
	case p.Quota == 0:
		k.add(path+".quota", "required: the units per window, more than 0")
	case p.Quota < 0:
		k.add(path+".quota", "must be more than 0 (got %d)", p.Quota)
	}
	switch {
	case p.Algorithm == algConcurrency:
		if p.Window != 0 {
			k.add(path+".window", "must be absent: the concurrency algorithm has no window")
		}
	case p.Window == 0:
		k.add(path+".window", "required: the period in whole seconds, such as 60s")
	case p.Window < 0:
		k.add(path+".window", "must be more than 0, such as 60s (got %s)", p.Window)
	case p.Window%time.Second != 0:
		k.add(path+".window", "must be whole seconds, such as 1s or 60s (got %s)", p.Window)
	}
	k.enum(path+".scope", "scope", p.Scope, scopes)
	if p.Scope == scopeGlobal && c.Redis == nil {
		k.add(path+".scope", "global needs redis to be configured; use local, or configure redis")
	}
	k.enum(path+".on_store_failure", "on_store_failure value", p.OnStoreFailure, storeFailures)
	k.enum(path+".mode", "mode", p.Mode, modes)
	switch {
	case p.MaxDelay < 0:
		k.add(path+".max_delay", "must not be negative (got %s)", p.MaxDelay)
	case p.MaxDelay > 0 && p.Algorithm != algLeakyBucket:
		k.add(path+".max_delay", "applies only to the %s algorithm; remove it", algLeakyBucket)
	}
	switch {
	case p.Lease < 0:
		k.add(path+".lease", "must not be negative (got %d)", p.Lease)
	case p.Lease > 0 && p.Scope != scopeGlobal:
		k.add(path+".lease", "applies only to scope global; remove it")
	case p.Lease > 0 && p.Quota > 0 && p.Lease > p.Quota:
		k.add(path+".lease", "must be at most quota (%d)", p.Quota)
	}
	for j, s := range p.Key {
		if problem := keySourceProblem(s); problem != "" {
			k.add(fmt.Sprintf("%s.key[%d]", path, j), "%s", problem)
		}
	}
	for j, m := range p.Match.Methods {
		if !isToken(m) || strings.ToUpper(m) != m {
			k.add(fmt.Sprintf("%s.match.methods[%d]", path, j), "must be an upper-case method such as GET (got %q)", m)
		}
	}
	if pp := p.Match.PathPrefix; pp != "" && !strings.HasPrefix(pp, "/") {
		k.add(path+".match.path_prefix", `must start with "/", such as /api/ (got %q)`, pp)
	}
	if h := p.Match.Host; h != "" && (strings.ContainsAny(h, "/ \t@") || hasControl(h)) {
		k.add(path+".match.host", "must be a host name such as api.example.com, without scheme or path (got %q)", h)
	}
}

// name checks the name of list[i] at path: required (need says what it is), a
// Structured Fields String, unique among names (name → index so far).
func (k *checker) name(path, list string, i int, name string, names map[string]int, need string) {
	switch j, dup := names[name]; {
	case name == "":
		k.add(path+".name", "required: %s", need)
	case !isSFString(name):
		k.add(path+".name", `must be printable ASCII without '"' or '\' (got %q)`, name)
	case dup:
		k.add(path+".name", "%q is already the name of %s[%d]; names must be unique", name, list, j)
	default:
		names[name] = i
	}
}

// keySourceProblem checks one entry of Policy.Key.
func keySourceProblem(s string) string {
	switch kind, name, _ := strings.Cut(s, ":"); {
	case s == "bearer" || s == keyIP:
	case kind == "header":
		if !isToken(name) {
			return fmt.Sprintf("%q is not a header field name; use header:NAME such as header:X-API-Key", name)
		}
	case kind == "query":
		if name == "" {
			return "query:NAME needs a parameter name, such as query:api_key"
		}
	default:
		return fmt.Sprintf("unknown key source %q; use header:NAME, bearer, query:NAME or ip", s)
	}
	return ""
}

// url checks an absolute URL with one of schemes and a host, and reports whether it
// is one.
func (k *checker) url(path, s string, schemes []string, example string) bool {
	u, err := url.Parse(s)
	if err != nil || !slices.Contains(schemes, u.Scheme) || u.Host == "" || u.Opaque != "" {
		k.add(path, "must be an absolute %s URL such as %s (got %q)", oneOf(schemes), example, s)
		return false
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			k.add(path, "port %q must be from 1 to 65535", port)
			return false
		}
	}
	if u.Fragment != "" || strings.HasSuffix(s, "#") {
		k.add(path, "must not have a #fragment (got %q)", s)
		return false
	}
	return true
}

// hostPortProblem checks a host:port listen or dial address, port 0 only if zero.
func hostPortProblem(s string, zero bool) string {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "must be host:port"
	}
	lo := 1
	if zero {
		lo = 0
	}
	if n, err := strconv.Atoi(port); err != nil || !isDigits(port) || n < lo || n > 65535 {
		return fmt.Sprintf("port %q must be a number from %d to 65535", port, lo)
	}
	if strings.ContainsAny(host, "/ \t@") || hasControl(host) {
		return fmt.Sprintf("host %q is not a host name or IP address", host)
	}
	return ""
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// isToken reports whether s is an RFC 9110 token, as header names and methods are.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0) {
			return false
		}
	}
	return true
}

// isSFString reports whether s can be sent as a Structured Fields String without
// escapes.
func isSFString(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e || s[i] == '"' || s[i] == '\\' {
			return false
		}
	}
	return true
}

func isDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

func hasControl(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f })
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// oneOf returns "a, b or c".
func oneOf(values []string) string {
	if len(values) == 1 {
		return values[0]
	}
	return strings.Join(values[:len(values)-1], ", ") + " or " + values[len(values)-1]
}

// short formats d without zero units: 10m rather than 10m0s.
func short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
