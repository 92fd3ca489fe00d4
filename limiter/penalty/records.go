package penalty

import (
	"fmt"
	"time"

	"github.com/h3edge/h3edge/limiter/minheap"
)

// The ban records, all guarded by Box.mu: the records themselves, the queues of their
// changes, the timer, and the publishing of the tables Banned reads.

// banRecord is a prefix's ban in force, or its last ban, remembered.
type banRecord struct {
	ban    Ban
	key    boxKey
	until  int64 // ban.Until, ns
	forget int64 // until+MaxBan: when the record is dropped once the ban has ended
	active bool  // in force: in the published tables and in ending
	gen    uint64
}

// banQueue holds the instants (ns) at which records change: end (ending) or are
// forgotten (lapsing), soonest first. An item whose gen is not its record's is stale and
// skipped.
type banQueue = minheap.Heap[int64, banRef]

// banRef names the record a banQueue item is for.
type banRef struct {
	gen uint64
	key boxKey
}

// advanceNow advances the box to the wall clock and returns the instant reached.
func (p *Box) advanceNow() int64 { return p.advance(p.now().UnixNano()) }

// advance moves the box's clock to t, if later, ends the bans due by then and forgets
// the records due. It returns the clock.
func (p *Box) advance(t int64) int64 {
	if c := p.clock.Load(); t > c {
		p.clock.Store(t)
	} else {
		t = c
	}
	for p.ending.Len() > 0 && p.ending.Items[0].Key <= t {
		it := p.ending.Pop()
		if rec := p.records[it.Value.key]; rec != nil && rec.gen == it.Value.gen && rec.active {
			p.deactivate(rec)
			p.queue(&p.lapsing, rec.forget, banRef{rec.gen, rec.key})
		}
	}
	for p.lapsing.Len() > 0 && p.lapsing.Items[0].Key <= t {
		it := p.lapsing.Pop()
		if rec := p.records[it.Value.key]; rec != nil && rec.gen == it.Value.gen && !rec.active {
			delete(p.records, it.Value.key)
		}
	}
	return t
}

// set bans k until until with b's details, b.Count raised to a repeat of a remembered
// ban, or extends the ban in force. It reports the ban in force and whether it is new
// or ends later than before.
func (p *Box) set(k boxKey, b Ban, until int64) (Ban, bool, error) {
	rec := p.records[k]
	if rec != nil && rec.active {
		changed := until > rec.until
		if changed {
			rec.until, rec.ban.Until, rec.forget = until, b.Until, until+int64(p.cfg.MaxBan)
			if b.Reason != "" {
				rec.ban.Reason = b.Reason
			}
			p.gen++
			rec.gen = p.gen
			p.queue(&p.ending, until, banRef{rec.gen, k})
			p.edit(k).put(k, until)
		}
		rec.ban.Count = max(rec.ban.Count, b.Count)
		rec.ban.Shared = rec.ban.Shared && b.Shared
		return rec.ban, changed, nil
	}
	count := 1
	if rec != nil {
		count = rec.ban.Count + 1
	} else {
		if len(p.records) >= p.cfg.MaxTracked && !p.forgetOne() {
			return Ban{}, false, fmt.Errorf("%w: %d bans in force", ErrBanListFull, p.active)
		}
		rec = &banRecord{key: k}
		p.records[k] = rec
	}
	b.Count = max(b.Count, count)
	p.gen++
	rec.ban, rec.until, rec.forget, rec.gen = b, until, until+int64(p.cfg.MaxBan), p.gen
	rec.active = true
	p.active++
	p.lenCount[k.family()][k.bits]++
	p.lensSet = true
	p.edit(k).put(k, until)
	p.queue(&p.ending, until, banRef{rec.gen, k})
	p.total++
	return rec.ban, true, nil
}

// deactivate takes rec's ban out of force; the record stays.
func (p *Box) deactivate(rec *banRecord) {
	rec.active = false
	p.active--
	p.lenCount[rec.key.family()][rec.key.bits]--
	p.lensSet = true
	p.edit(rec.key).del(rec.key)
}

// forgetOne drops the remembered record that would be forgotten soonest, to make room.
// It reports false if no record is merely remembered.
func (p *Box) forgetOne() bool {
	for p.lapsing.Len() > 0 {
		it := p.lapsing.Pop()
		if rec := p.records[it.Value.key]; rec != nil && rec.gen == it.Value.gen && !rec.active {
			delete(p.records, it.Value.key)
			return true
		}
	}
	return false
}

// queue pushes ref's instant at onto q, and rebuilds q from the records when stale
// items make up most of it.
func (p *Box) queue(q *banQueue, at int64, ref banRef) {
	q.Push(at, ref)
	if q.Len() <= 2*len(p.records)+64 {
		return
	}
	ending := q == &p.ending
	q.Items = q.Items[:0]
	for _, rec := range p.records {
		if rec.active && ending {
			q.Push(rec.until, banRef{rec.gen, rec.key})
		} else if !rec.active && !ending {
			q.Push(rec.forget, banRef{rec.gen, rec.key})
		}
	}
}

// settle ends a change: it publishes the edited tables and sets the timer.
func (p *Box) settle() {
	p.publish()
	p.schedule()
}

// schedule sets the timer for the next ban to end, or stops it when none is in force.
func (p *Box) schedule() {
	for p.ending.Len() > 0 {
		it := p.ending.Items[0]
		if rec := p.records[it.Value.key]; rec != nil && rec.gen == it.Value.gen && rec.active {
			break
		}
		p.ending.Pop()
	}
	if p.ending.Len() == 0 {
		if p.timerAt != 0 {
			p.timer.Stop()
			p.timerAt = 0
		}
		return
	}
	at := p.ending.Items[0].Key
	if at == p.timerAt {
		return
	}
	d := time.Duration(at - p.now().UnixNano())
	if p.timer == nil {
		p.timer = time.AfterFunc(d, p.endBans)
	} else {
		p.timer.Reset(d)
	}
	p.timerAt = at
}

// endBans is the timer's: it ends the bans due by the wall clock.
func (p *Box) endBans() {
	p.mu.Lock()
	p.timerAt = 0
	p.advanceNow()
	p.settle()
	p.mu.Unlock()
}

// edit returns the private copy of the table that holds k, made on first use since the
// last publish.
func (p *Box) edit(k boxKey) *banTable {
	i := k.hash() >> banShift
	tab := p.dirty[i]
	if tab == nil {
		tab = p.tables[i].Load().clone()
		p.dirty[i] = tab
	}
	return tab
}

// publish swaps in the edited tables, then the prefix-length masks: a reader that sees
// a length finds its bans.
func (p *Box) publish() {
	for i, tab := range p.dirty {
		if tab.n == 0 {
			tab = nil
		}
		p.tables[i].Store(tab)
	}
	clear(p.dirty)
	if !p.lensSet {
		return
	}
	p.lensSet = false
	var m4 uint64
	var m6 [3]uint64
	for l, n := range p.lenCount[0][:33] {
		if n > 0 {
			m4 |= 1 << l
		}
	}
	for l, n := range p.lenCount[1] {
		if n > 0 {
			m6[l/64] |= 1 << (l % 64)
		}
	}
	p.lens4.Store(m4)
	for w := range m6 {
		p.lens6[w].Store(m6[w])
	}
}
