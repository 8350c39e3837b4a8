package multihop

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
)

// Doc is one document of the corpus: an entity's title and its facts.
type Doc struct {
	Title string `json:"title"`
	Text  string `json:"text"`
}

// Question is a two-hop question: its answer and the titles of the two
// documents that hold the chain (the first names the second).
type Question struct {
	Text   string    `json:"text"`
	Answer string    `json:"answer"`
	Hops   [2]string `json:"hops"`
}

// Sizes are how many entities of each kind a corpus has.
type Sizes struct {
	People, Cities, Countries, Companies int
}

// DefaultSizes: 48 people, 12 cities in 4 countries, 8 companies — 72
// documents, 96 questions.
func DefaultSizes() Sizes { return Sizes{People: 48, Cities: 12, Countries: 4, Companies: 8} }

// Corpus is the generated world: documents (sorted by title) and
// questions (two per person).
type Corpus struct {
	Docs      []Doc
	Questions []Question
	byTitle   map[string]int
}

var professions = []string{"an engineer", "a painter", "a teacher", "a pilot", "a chemist", "a farmer", "a judge", "a baker"}

// NewCorpus generates the corpus of seed: the same seed and sizes give the
// same documents and questions everywhere (a PCG stream, no map order).
func NewCorpus(seed uint64, s Sizes) (*Corpus, error) {
	if s.People < 1 || s.Cities < 1 || s.Countries < 1 || s.Companies < 1 {
		return nil, fmt.Errorf("multihop: sizes %+v: want at least one entity of each kind", s)
	}
	rng := rand.New(rand.NewPCG(seed, 0x6d756c7469686f70))
	names := newNamer(rng)
	countries := names.words(s.Countries, 2)
	cities := names.words(s.Cities, 3)
	companies := names.words(s.Companies, 2)
	for i := range companies {
		companies[i] += " " + []string{"Works", "Labs", "Foundry", "Trading"}[rng.IntN(4)]
	}
	people := make([]string, s.People)
	for i := range people {
		people[i] = names.person()
	}
	c := &Corpus{byTitle: map[string]int{}}
	cityOf := make([]int, s.People)
	companyOf := make([]int, s.People)
	founder := make([]string, s.Companies)
	for _, name := range countries {
		c.Docs = append(c.Docs, Doc{name, fmt.Sprintf("%s is a country with %d provinces.", name, 3+rng.IntN(20))})
	}
	cityCountry := make([]int, s.Cities)
	for i, name := range cities {
		cityCountry[i] = i % s.Countries // every country has a city
		if i >= s.Countries {
			cityCountry[i] = rng.IntN(s.Countries)
		}
		c.Docs = append(c.Docs, Doc{name, fmt.Sprintf("%s is a city in %s.", name, countries[cityCountry[i]])})
	}
	for i, name := range companies {
		// Founders are drawn from a separate pool of people who only
		// appear as founders, so an answer is never a question's subject.
		founder[i] = names.person()
		c.Docs = append(c.Docs, Doc{name, fmt.Sprintf("%s is a company founded by %s.", name, founder[i])})
	}
	for i, name := range people {
		cityOf[i], companyOf[i] = rng.IntN(s.Cities), rng.IntN(s.Companies)
		c.Docs = append(c.Docs, Doc{name, fmt.Sprintf("%s is %s born in %s. %s works for %s.",
			name, professions[rng.IntN(len(professions))], cities[cityOf[i]], name, companies[companyOf[i]])})
		c.Questions = append(c.Questions,
			Question{Text: fmt.Sprintf("In which country was %s born?", name), Answer: countries[cityCountry[cityOf[i]]],
				Hops: [2]string{name, cities[cityOf[i]]}},
			Question{Text: fmt.Sprintf("Who founded the company %s works for?", name), Answer: founder[companyOf[i]],
				Hops: [2]string{name, companies[companyOf[i]]}})
	}
	sort.Slice(c.Docs, func(i, j int) bool { return c.Docs[i].Title < c.Docs[j].Title })
	for i, d := range c.Docs {
		c.byTitle[strings.ToLower(d.Title)] = i
	}
	return c, nil
}

// Lookup returns the document titled title (case and surrounding space
// ignored).
func (c *Corpus) Lookup(title string) (Doc, bool) {
	i, ok := c.byTitle[strings.ToLower(strings.TrimSpace(title))]
	if !ok {
		return Doc{}, false
	}
	return c.Docs[i], true
}

// Search ranks the documents by how many of the query's words they hold
// (a word of the title counts twice) and returns up to k titles, best
// first, ties in title order; none when no word matches.
func (c *Corpus) Search(query string, k int) []string {
	q := words(query)
	type hit struct {
		score int
		title string
	}
	var hits []hit
	for _, d := range c.Docs {
		title, text := words(d.Title), words(d.Text)
		score := 0
		for w := range q {
			if title[w] {
				score += 2
			}
			if text[w] {
				score++
			}
		}
		if score > 0 {
			hits = append(hits, hit{score, d.Title})
		}
	}
	sort.SliceStable(hits, func(i, j int) bool { return hits[i].score > hits[j].score })
	var out []string
	for i := 0; i < len(hits) && i < k; i++ {
		out = append(out, hits[i].title)
	}
	return out
}

// words is the set of a text's lower-cased words (letters and digits),
// less a few that match everything.
func words(s string) map[string]bool {
	out := map[string]bool{}
	for _, w := range strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
	}) {
		if !stop[w] {
			out[w] = true
		}
	}
	return out
}

var stop = map[string]bool{"a": true, "an": true, "the": true, "is": true, "in": true, "of": true, "for": true,
	"by": true, "was": true, "who": true, "which": true, "with": true, "born": true, "works": true, "company": true}

// namer draws unique pronounceable names.
type namer struct {
	rng  *rand.Rand
	used map[string]bool
}

func newNamer(rng *rand.Rand) *namer { return &namer{rng: rng, used: map[string]bool{}} }

const (
	consonants = "bdfgklmnprstvz"
	vowels     = "aeiou"
)

func (n *namer) word(syllables int) string {
	for {
		var b strings.Builder
		for range syllables {
			b.WriteByte(consonants[n.rng.IntN(len(consonants))])
			b.WriteByte(vowels[n.rng.IntN(len(vowels))])
		}
		if n.rng.IntN(2) == 0 {
			b.WriteByte(consonants[n.rng.IntN(len(consonants))])
		}
		w := strings.ToUpper(b.String()[:1]) + b.String()[1:]
		if !n.used[strings.ToLower(w)] && !stop[strings.ToLower(w)] {
			n.used[strings.ToLower(w)] = true
			return w
		}
	}
}

func (n *namer) words(k, syllables int) []string {
	out := make([]string, k)
	for i := range out {
		out[i] = n.word(syllables)
	}
	return out
}

func (n *namer) person() string { return n.word(2) + " " + n.word(2) }
