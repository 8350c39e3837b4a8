// Package scenario is the value language of the cores' scenario files
// (issue 31 item 7): a core's table tests written as data — inputs in, the
// core's Ready printed out — in the style of etcd-io/raft's interaction
// tests, which run github.com/cockroachdb/datadriven files. datadriven
// reads the files and rewrites their expected output (`-rewrite`); this
// package turns one line of a file into the typed Go value the core takes.
//
// # Lines
//
// A line names a type of the caller's Registry and sets its fields:
//
//	StepTrained token=5 step=1 version=1 groups=[g1 g2] reward=0.5
//	ProgressClaimed token=5 prev=$prev3 claimed=$prev3(token=5 holder=n1)
//	PromptConsumed token=5 attempt=(prompt=t5/p1 group=g1)
//	MembersChanged members=[(name=n1) (name=n2 engines={n2-engine-0:http://a})]
//
// Field names match the struct's exported fields case-insensitively. A
// value is
//   - a bare word (no spaces or brackets) or a Go-quoted string, read as
//     the field's kind: string, bool (a field named alone is true), any
//     int or uint, float, time.Duration ("1m30s");
//   - (fields…): a struct value, its fields set the same way; the
//     fields not named keep the value they had (Fields' starting value,
//     or zero);
//   - [values…]: a slice, its elements separated by spaces;
//   - {key:value …}: a map, split at each entry's first colon;
//   - $name or $name(fields…): a value the file defined earlier, copied,
//     with the fields in brackets changed.
//
// A field not named keeps its zero value; an unknown field, an unknown
// type, a value that does not read as its field's kind or text left over
// is an error naming the line, so a typo fails the test instead of
// testing the zero value.
//
// The package is a leaf tool: standard library only, no clock, no I/O.
package scenario
