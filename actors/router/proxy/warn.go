package proxy

import "time"

// warnInterval is the least time between two logged warnings of one kind
// for one replica; the ones in between are counted and the count goes
// out with the next one logged (actors.LimitedLogger). At 131,072
// requests in flight a replica that dies fails thousands of them at once,
// one warning each.
const warnInterval = 10 * time.Second

// warn logs an upstream failure, rate-limited per replica and message.
func (r *Router) warn(replica, msg string, err error) {
	r.warns.Warn(replica+" "+msg).Err(err).Str("replica", replica).Msg(msg)
}
