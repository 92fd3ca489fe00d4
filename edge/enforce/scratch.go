package enforce

import (
	"net/http"

	"github.com/h3edge/h3edge/edge/identity"
	"github.com/h3edge/h3edge/edge/rules"
	"github.com/h3edge/h3edge/headers"
	"github.com/h3edge/h3edge/limiter"
)

// scratch is the per-request space of Serve, pooled so that a decision allocates
// nothing: the enforced batch, the shadow requests, the client keys resolved, and the
// fields being built.
type scratch struct {
	batch
	shadow shadowBatch
	keys   keyCache
	fields fieldScratch
}

// batch is a set of enforced requests decided together, all-or-nothing (a request's
// enforced policies, or a streamed body's content-bytes ones), with what deciding it
// takes and what it holds once allowed.
type batch struct {
	reqs      []limiter.Request
	rules     []*rules.Rule // rules[i] made reqs[i]
	anyGlobal bool
	out       []limiter.Decision // one per request, in order
	// skip marks decisions (by index) that were not made and stay out of the fields.
	skip  uint64
	split split
	held  held
}

// split is decideEnforced's scratch space: the local and global parts of a batch with
// their indices in it.
type split struct {
	lreq, greq []limiter.Request
	lidx, gidx []int
	tmp        []limiter.Request
	decisions  []limiter.Decision
}

// held lists the units a request holds until its response ends, by the store that
// holds them (release gives them back).
type held struct {
	local, global []limiter.Request
}

// shadowBatch is a request's shadow policies, decided on their own.
type shadowBatch struct {
	reqs   []limiter.Request
	global []bool // reqs[i] is of a global policy
}

// keyCache is the client keys of one request: per key chain, and the last address and
// credential hashed, so chains resolving alike hash once (a hash is most of a key's
// cost).
type keyCache struct {
	byChain      []limiter.Key
	ok           []bool // byChain[i] is resolved
	ip, cred     limiter.Key
	credVal      string
	ipOK, credOK bool
	memo         *identity.Memo // the connection's, looked up once per request
	memoOK       bool
}

// fieldScratch is where the RateLimit field is built.
type fieldScratch struct {
	limits []headers.Limit
	rule   []int // limits[i] is for rules[rule[i]]
	buf    []byte
}

// reset readies d for a request of a rule set with chains key chains.
func (d *scratch) reset(chains int) {
	d.batch.reset()
	d.shadow.reqs, d.shadow.global = d.shadow.reqs[:0], d.shadow.global[:0]
	k := &d.keys
	k.byChain, k.ok = k.byChain[:0], k.ok[:0]
	for range chains {
		k.byChain = append(k.byChain, limiter.Key{})
		k.ok = append(k.ok, false)
	}
	k.ipOK, k.credOK, k.credVal, k.memo, k.memoOK = false, false, "", nil, false
	d.fields.limits, d.fields.rule = d.fields.limits[:0], d.fields.rule[:0]
}

func (b *batch) reset() {
	b.reqs, b.rules, b.out, b.anyGlobal, b.skip = b.reqs[:0], b.rules[:0], b.out[:0], false, 0
	b.held.local, b.held.global = b.held.local[:0], b.held.global[:0]
}

// memoOf returns r's connection memo, looked up once per request.
func (k *keyCache) memoOf(r *http.Request) *identity.Memo {
	if !k.memoOK {
		k.memo, k.memoOK = identity.MemoOf(r), true
	}
	return k.memo
}
