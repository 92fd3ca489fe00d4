// Package redisstore is a limiter.Store that keeps rate-limit state in Redis (a
// single node, Sentinel, or Redis Cluster), so every edge of a fleet enforces one
// quota per client key, with the same decisions limiter.Local makes at the same
// instants.
//
// # Decisions
//
// Each decision is one Lua script call (lua/decide.lua with every algorithm's step,
// lua/<algorithm>.lua, loaded with it) that decides all of a request's policies for
// one client key, all-or-nothing, and stores the new state with an expiry in the same
// call. Scripts never read a clock: the edge passes its instant corrected by its
// measured offset to the Redis clock (TIME), so every edge counts windows on the
// store's clock. Instants travel as 20-digit decimal strings (Lua numbers are doubles)
// and every other quantity stays below 2^53, so the scripts mirror limiter's exact
// integer step functions; the script returns the state it read, and the store replays
// the limiter's own step on it to fill in Remaining, RetryAfter and ResetAfter.
//
// Keys are h3edge:{<hex of limiter.Key>}:<policy name>.<policy id>: one client's
// policies share a Cluster slot, the policy id changes with the policy's parameters
// (a reload never reads state counted under other parameters), and raw client keys
// never reach Redis (limiter.Key is a keyed hash).
//
// # Round trips
//
//   - Batching (Config.Batch): concurrent decisions travel together, one script call
//     per slot and one pipeline per flush, bounded by size and a sub-millisecond
//     delay; no round trip is ever retried once it may have reached Redis, so nothing
//     is charged twice.
//   - Negative cache (Config.NegativeCache): a denial is remembered until its
//     RetryAfter and repeats are denied locally.
//   - Lease mode (Config.Lease): an edge takes up to N units of a hot key at once and
//     spends them locally; over-admission is bounded by N × edges (see Config.Lease).
//
// # Failure
//
// Config.Timeout bounds every decision. Errors wrap ErrUnavailable; the edge then
// applies the policy's on_store_failure: open (admit, limited by a local backstop
// such as a limiter.Local with the same policies), closed (503), or local (a
// limiter.Local with each quota divided by FleetSize). A circuit breaker opens after
// repeated failures, fails decisions at once with ErrCircuitOpen, probes Redis and
// closes when it answers (Breaker, BreakerConfig.OnChange).
//
// # Concurrency and bans
//
// Global concurrency policies hold one sorted-set member per unit, scored by expiry,
// renewed while held and removed by Release; the units of an edge that dies return
// within Config.ConcurrencyTTL. BanBus shares the penalty box's bans between edges.
//
// # Size
//
// The package is about 2 900 lines, beyond the module's ~2 000, because it is the one
// importer of go-redis (DESIGN §2): every use of Redis — decisions, concurrency units,
// the shared bans (BanBus), ACME's blobs and lock (Blobs), the plans' hash (ScanHash) —
// goes through the one client, its clock offset, its timeout and its breaker, which a
// sub-package could reach only by exporting them. Each concern has its own file
// (call.go, batch.go, negcache.go, breaker.go, concurrency.go, banbus.go, blob.go, …).
package redisstore
