package redisstore

import (
	"encoding/hex"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/h3edge/h3edge/limiter"
)

// Key layout. Every key a decision touches is h3edge:{<hex of the client key's hash>}:
// <policy>.<policy id>, so all of one client's policies share a Redis Cluster slot;
// the policy id is a hash of the policy's name and parameters, so a reloaded policy
// with other parameters never reads state counted under the old ones. Raw client keys
// never reach Redis: limiter.Key is already a keyed hash.
const (
	keyPrefix   = "h3edge:"
	fleetKey    = "h3edge:{edge}"     // sorted set: edge id → heartbeat expiry (ms)
	edgeKeyPre  = "h3edge:{edge}:"    // + edge id: the edge's heartbeat
	bansKey     = "h3edge:{bans}"     // sorted set: prefix → ban end (ms)
	reasonsKey  = "h3edge:{bans}:why" // hash: prefix → reason
	banChannel  = "h3edge:bans"
	policyCodes = "blfsgc"
)

// policyInfo is what the store derives once per *limiter.Policy.
type policyInfo struct {
	p      *limiter.Policy
	params limiter.Params
	code   byte   // the algorithm's code in the scripts (see lua/*.lua)
	suffix string // "}:" + name + "." + id, the end of the policy's keys
	blob   []byte // code and parameters, as the scripts read them (readPolicies)
	window int64  // ns
	lease  int64  // units taken at once in lease mode; 0 = exact
}

// policies caches policyInfo by policy. Policies are made once per configuration, so
// the cache stays small: a map replaced on every addition (copy on write), read
// without locking on the decision path. It is emptied if a long run of reloads grows
// it past maxPolicies.
type policies struct {
	m  atomic.Pointer[map[*limiter.Policy]*policyInfo]
	mu sync.Mutex // serializes additions
}

const maxPolicies = 4096

func (ps *policies) get(p *limiter.Policy, lease func(*limiter.Policy) int64, concTTL time.Duration) (*policyInfo, bool) {
	if m := ps.m.Load(); m != nil {
		if pi, ok := (*m)[p]; ok {
			return pi, true
		}
	}
	pi, ok := newPolicyInfo(p, lease, concTTL)
	if !ok {
		return nil, false
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	next := make(map[*limiter.Policy]*policyInfo)
	if m := ps.m.Load(); m != nil && len(*m) < maxPolicies {
		if prev, ok := (*m)[p]; ok {
			return prev, true
		}
		for k, v := range *m {
			next[k] = v
		}
	}
	next[p] = pi
	ps.m.Store(&next)
	return pi, true
}

func newPolicyInfo(p *limiter.Policy, lease func(*limiter.Policy) int64, concTTL time.Duration) (*policyInfo, bool) {
	par, ok := p.Params()
	if !ok {
		return nil, false
	}
	pi := &policyInfo{p: p, params: par, window: int64(p.Window)}
	var f []int64
	var ttl time.Duration // the bucket family's expiry: the fullest backlog's drain time
	ticks := func(units int64) time.Duration {
		return time.Duration((units/par.PerTick + 2) * par.Tick)
	}
	switch p.Algorithm {
	case limiter.TokenBucket, limiter.GCRA:
		pi.code = 'b'
		f = []int64{par.PerTick, par.PerUnit, par.CapUnits, par.Burst, par.DrainAll}
		ttl = ticks(par.CapUnits + par.PerTick)
	case limiter.LeakyBucket:
		pi.code = 'l'
		f = []int64{par.PerTick, par.PerUnit, par.DelayMax, p.Quota, par.DrainAll}
		ttl = ticks(par.DelayMax + p.Quota*par.PerUnit)
	case limiter.FixedWindow:
		pi.code = 'f'
		f = []int64{p.Quota}
	case limiter.SlidingWindow:
		pi.code = 's'
		f = []int64{p.Quota, par.WindowTicks}
	case limiter.SlidingLog:
		pi.code = 'g'
		f = []int64{p.Quota, int64(p.Window)}
	case limiter.Concurrency:
		pi.code = 'c'
		f = []int64{p.Quota, concTTL.Milliseconds()}
	default:
		return nil, false
	}
	q := blob{b: []byte{pi.code}}
	for i := range 6 {
		if i < len(f) {
			q.int(min(f[i], maxExact))
		} else {
			q.zeros(1)
		}
	}
	if ttl > 0 {
		q.b = strconv.AppendInt(q.b, (ttl+time.Millisecond-1).Milliseconds()+1000, 10)
	}
	pi.blob = append(q.b, 0)
	if lease != nil && pi.code != 'l' && pi.code != 'c' {
		pi.lease = min(max(lease(p), 0), p.Quota)
	}
	var b strings.Builder
	b.WriteString("}:")
	for _, r := range p.Name {
		// Names are the operator's; keep keys printable and the hash tag intact.
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	b.WriteByte('.')
	b.WriteString(strconv.FormatUint(par.ID, 36))
	pi.suffix = b.String()
	return pi, true
}

// redisKey returns the key of k's state under pi's policy.
func (pi *policyInfo) redisKey(k *limiter.Key) string {
	var b strings.Builder
	b.Grow(len(keyPrefix) + 1 + 2*len(k) + len(pi.suffix))
	b.WriteString(keyPrefix)
	b.WriteByte('{')
	var h [2 * len(limiter.Key{})]byte
	hex.Encode(h[:], k[:])
	b.Write(h[:])
	b.WriteString(pi.suffix)
	return b.String()
}

// slotOf returns the Redis Cluster slot of k's keys: CRC16 (XMODEM) of the hash tag,
// the hex of k, modulo 16384.
func slotOf(k *limiter.Key) int {
	var h [2 * len(limiter.Key{})]byte
	hex.Encode(h[:], k[:])
	var crc uint16
	for _, c := range h {
		crc ^= uint16(c) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
