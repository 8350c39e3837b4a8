package scenario

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

type kind int

const (
	eof kind = iota
	word
	quoted
	punct
)

type token struct {
	kind kind
	text string
	// spaced: whitespace came before the token ($name(…) needs none).
	spaced bool
}

type lexer struct {
	toks []token
	i    int
}

func (l *lexer) peek() token {
	if l.i < len(l.toks) {
		return l.toks[l.i]
	}
	return token{kind: eof, text: "end of line"}
}

func (l *lexer) next() token {
	t := l.peek()
	if l.i < len(l.toks) {
		l.i++
	}
	return t
}

const puncts = "()[]{}="

// lex splits a line into words, Go-quoted strings and the punctuation of
// puncts.
func lex(s string) (*lexer, error) {
	l := &lexer{}
	spaced := false
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case unicode.IsSpace(rune(c)):
			spaced = true
			i++
			continue
		case strings.IndexByte(puncts, c) >= 0:
			l.toks = append(l.toks, token{kind: punct, text: s[i : i+1], spaced: spaced})
			i++
		case c == '"':
			q, err := strconv.QuotedPrefix(s[i:])
			if err != nil {
				return nil, fmt.Errorf("scenario: %q: unterminated string at column %d", s, i+1)
			}
			text, _ := strconv.Unquote(q)
			l.toks = append(l.toks, token{kind: quoted, text: text, spaced: spaced})
			i += len(q)
		default:
			j := i
			for j < len(s) && !unicode.IsSpace(rune(s[j])) && strings.IndexByte(puncts, s[j]) < 0 && s[j] != '"' {
				j++
			}
			l.toks = append(l.toks, token{kind: word, text: s[i:j], spaced: spaced})
			i = j
		}
		spaced = false
	}
	return l, nil
}
