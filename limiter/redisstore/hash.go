package redisstore

import "context"

// hashPage is the COUNT hint of one HSCAN: fields per round trip, so that walking a
// large hash never holds Redis up for long.
const hashPage = 1000

// ScanHash walks the Redis hash at key with HSCAN, hashPage fields a round trip, and
// calls fn with each field and its value in the order Redis returns them. As with
// HSCAN, a field changed during the walk may come twice or not at all. A missing key
// is an empty hash. An error from fn stops the walk and is returned as it is; so is
// Redis's (WRONGTYPE for a key that is not a hash, or the failure to reach it).
func (s *Store) ScanHash(ctx context.Context, key string, fn func(field, value string) error) error {
	var cursor uint64
	for {
		kv, next, err := s.rdb.HScan(ctx, key, cursor, "", hashPage).Result()
		if err != nil {
			return err
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if err := fn(kv[i], kv[i+1]); err != nil {
				return err
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}
