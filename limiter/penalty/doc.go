// Package penalty is the edge's penalty box: it bans the address prefixes of sources
// that keep being rejected, and answers, for every datagram, TCP accept and stream,
// whether a source is banned.
//
// A [Box] owns all of that state: the rejection counts per source prefix, bounded by
// MaxTracked; the bans in force and the ended bans it still remembers so that a repeat
// lasts twice as long, queued by when they end or are forgotten; and the immutable,
// sharded tables that [Box.Banned] reads without a lock. Bans also come by hand
// ([Box.Add], the admin API) and from other edges ([Box.Apply]). [Config] holds the
// thresholds of DESIGN.md §4 (abuse:, and the prefix lengths and bound of ip:).
//
// The package imports the standard library and, of the module, limiter (the Source
// it counts and bans by) and limiter/minheap (its queues). Sharing bans between edges is
// limiter/redisstore's BanBus; closing a banned source's connections is the edge's,
// done in [Config.OnBan].
package penalty
