// Package logx builds the zerolog.Logger that the asyncrl binary hands to
// every actor shell, from the --log-level and --log-format flags (or the
// config's log section).
//
// Contract:
//   - Format auto writes JSON (one object per line) when the output is not a
//     terminal, so files and log collectors get machine-readable records,
//     and a human-readable console format on a terminal.
//   - Every record carries "level", "time" (UTC, RFC 3339 with milliseconds)
//     and "message"; child loggers from For/ForActor add "component" and
//     "actor" so one process's interleaved actors can be told apart.
//   - Limit wraps a logger so a warning repeated in a hot loop is let
//     through at most N times per period (house rule: repeated warnings are
//     rate-limited).
//   - ParseLevel and ParseFormat reject unknown names with an error that
//     lists the accepted ones (ErrLevel, ErrFormat).
//
// Only the binary calls New; libraries take a zerolog.Logger from their
// caller (zerolog.Nop() by default) and pure cores never log. logx changes
// no zerolog globals.
package logx
