package microbatch

import (
	"errors"
	"reflect"
	"testing"
)

// balancedCase is one row of a Balanced table: the bins it must return for
// tokens at cap.
type balancedCase struct {
	name   string
	cap    int
	tokens []int
	want   [][]int
}

// runBalanced checks each case's exact bins, order within a bin included.
func runBalanced(t *testing.T, cases []balancedCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Balanced(tc.tokens, tc.cap)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("bins %v, want %v", got, tc.want)
			}
		})
	}
}

// ffdCase is one row of a FirstFitDecreasing table: the bins it must return,
// or the error it must wrap when err is set.
type ffdCase struct {
	name              string
	tokens            []int
	cap, minBins, mul int
	want              [][]int
	err               error
}

// runFFD checks each case's exact bins, or that it fails with its error.
func runFFD(t *testing.T, cases []ffdCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FirstFitDecreasing(tc.tokens, tc.cap, tc.minBins, tc.mul)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("bins %v, want %v", got, tc.want)
			}
		})
	}
}

func TestBalancedReferenceVectors(t *testing.T) {
	runBalanced(t, []balancedCase{
		{"cap 15", 15, []int{10, 10, 5, 5}, [][]int{{0, 2}, {1, 3}}},
		{"cap 10", 10, []int{10, 1, 1, 1, 1, 1}, [][]int{{0}, {1, 2, 3, 4, 5}}},
		{"oversize alone", 50, []int{100, 10, 10}, [][]int{{0}, {1, 2}}},
		{"single oversize", 50, []int{100}, [][]int{{0}}},
		{"off", Off, []int{7, 9, 3}, [][]int{{0, 1, 2}}},
		{"empty", 10, nil, nil},
		// Least loaded, not first fit: 4 goes to the lighter bin (5),
		// where first fit would fill the 6-bin to 10.
		{"least loaded", 10, []int{6, 5, 4, 3}, [][]int{{0, 3}, {1, 2}}},
		{"stable sort on ties", 4, []int{2, 2, 2}, [][]int{{0, 1}, {2}}},
	})
}

func TestBalancedInvalid(t *testing.T) {
	if _, err := Balanced([]int{1}, 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("cap 0: %v", err)
	}
	if _, err := Balanced([]int{-1}, 10); !errors.Is(err, ErrInvalid) {
		t.Fatalf("negative tokens: %v", err)
	}
}

func TestFirstFitDecreasing(t *testing.T) {
	runFFD(t, []ffdCase{
		{"oversize raises", []int{150}, 100, 0, 1, nil, ErrOversize},
		{"min_bin_count 3", []int{10, 10, 10}, 100, 3, 1, [][]int{{2}, {0}, {1}}, nil},
		{"min_bin_count 5 with 2 sequences", []int{10, 10}, 100, 5, 1, nil, ErrTooFewSequences},
		{"first fit, not least loaded", []int{60, 30, 30, 10}, 100, 0, 1, [][]int{{0, 2, 3}, {1}}, nil},
		{"rounded to a multiple", []int{60, 50, 40}, 100, 0, 2, [][]int{{0, 2}, {1}}, nil},
		{"multiple needs more than n", []int{60, 50, 40}, 100, 0, 4, nil, ErrTooFewSequences},
		{"bad multiple", []int{1}, 100, 0, 0, nil, ErrInvalid},
	})
}
