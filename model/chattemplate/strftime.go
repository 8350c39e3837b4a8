package chattemplate

import (
	"fmt"
	"strings"
	"time"
)

// strftime formats t like Python's datetime.strftime in the C locale, for
// the directives chat templates use (Llama-3.1's "%d %b %Y" and the like):
// %a %A %b %B %d %e %H %I %j %m %M %p %S %y %Y %Z %z %%. An unknown directive
// is kept as written, as glibc's strftime does.
func strftime(t time.Time, format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 == len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		if f, ok := directives[format[i]]; ok {
			b.WriteString(f(t))
		} else {
			b.WriteByte('%')
			b.WriteByte(format[i])
		}
	}
	return b.String()
}

// directives formats each strftime directive strftime knows.
var directives = map[byte]func(time.Time) string{
	'a': func(t time.Time) string { return t.Weekday().String()[:3] },
	'A': func(t time.Time) string { return t.Weekday().String() },
	'b': func(t time.Time) string { return t.Month().String()[:3] },
	'h': func(t time.Time) string { return t.Month().String()[:3] },
	'B': func(t time.Time) string { return t.Month().String() },
	'd': func(t time.Time) string { return fmt.Sprintf("%02d", t.Day()) },
	'e': func(t time.Time) string { return fmt.Sprintf("%2d", t.Day()) },
	'H': func(t time.Time) string { return fmt.Sprintf("%02d", t.Hour()) },
	'I': func(t time.Time) string {
		h := t.Hour() % 12
		if h == 0 {
			h = 12
		}
		return fmt.Sprintf("%02d", h)
	},
	'j': func(t time.Time) string { return fmt.Sprintf("%03d", t.YearDay()) },
	'm': func(t time.Time) string { return fmt.Sprintf("%02d", int(t.Month())) },
	'M': func(t time.Time) string { return fmt.Sprintf("%02d", t.Minute()) },
	'p': func(t time.Time) string {
		if t.Hour() < 12 {
			return "AM"
		}
		return "PM"
	},
	'S': func(t time.Time) string { return fmt.Sprintf("%02d", t.Second()) },
	'y': func(t time.Time) string { return fmt.Sprintf("%02d", t.Year()%100) },
	'Y': func(t time.Time) string { return fmt.Sprintf("%d", t.Year()) },
	'Z': func(t time.Time) string { name, _ := t.Zone(); return name },
	'z': func(t time.Time) string { return t.Format("-0700") },
	'%': func(time.Time) string { return "%" },
}
