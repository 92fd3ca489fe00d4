package redisstore

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The scripts. Each algorithm's step is its own file; decide.lua and refund.lua are
// run with all of them loaded, as one script, so a decision over several policies of
// different algorithms is still one atomic call.
var (
	//go:embed lua/common.lua
	luaCommon string
	//go:embed lua/token_bucket.lua
	luaTokenBucket string
	//go:embed lua/leaky_bucket.lua
	luaLeakyBucket string
	//go:embed lua/fixed_window.lua
	luaFixedWindow string
	//go:embed lua/sliding_window.lua
	luaSlidingWindow string
	//go:embed lua/sliding_log.lua
	luaSlidingLog string
	//go:embed lua/concurrency.lua
	luaConcurrency string
	//go:embed lua/decide.lua
	luaDecide string
	//go:embed lua/refund.lua
	luaRefund string
	//go:embed lua/renew.lua
	luaRenew string
	//go:embed lua/fleet.lua
	luaFleet string
	//go:embed lua/ban.lua
	luaBan string
)

func withAlgorithms(main string) string {
	return luaCommon + luaTokenBucket + luaLeakyBucket + luaFixedWindow + luaSlidingWindow +
		luaSlidingLog + luaConcurrency + main
}

var (
	decideScript = redis.NewScript(withAlgorithms(luaDecide))
	refundScript = redis.NewScript(withAlgorithms(luaRefund))
	renewScript  = redis.NewScript(luaRenew)
	fleetScript  = redis.NewScript(luaFleet)
	banScript    = redis.NewScript(luaBan)

	// scripts are loaded at start and whenever Redis comes back.
	scripts = []*redis.Script{decideScript, refundScript, renewScript, fleetScript, banScript}
)
