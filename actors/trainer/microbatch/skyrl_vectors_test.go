package microbatch

import "testing"

// The vectors below are SkyRL's own (tests/backends/skyrl_train/
// test_token_based_batching_utils.py and tests/backends/skyrl_train/
// distributed/test_bin_packing.py in NovaSky-AI/SkyRL), with the exact bins
// and order worked out by hand from skyrl/train/dataset/bin_packing.py:
// Balanced sorts by length only (descending, stable), FirstFitDecreasing
// sorts (length, index) pairs descending, each bin lists its indices in
// insertion order, and _adjust_bin_count fills each extra bin with one
// sequence popped from the end of the largest ((size, index) descending)
// bin that still holds more than one.

func TestBalancedSkyRLOrder(t *testing.T) {
	runBalanced(t, []balancedCase{
		// Order within a bin is insertion order: 1 (5 tokens) first, then
		// 0 (3), then 2 (2).
		{"insertion order", 10, []int{3, 5, 2}, [][]int{{1, 0, 2}}},
		// test_all_indices_covered / test_no_overflow input: 0(8) opens b0,
		// 5(7) b1, 3(6) b2; 2(5) → least-loaded b2 (6+5 = 11 fits);
		// 1(3) → b1 (7+3); 4(2) → b0 (8+2).
		{"skyrl covered", 11, []int{8, 3, 5, 6, 2, 7}, [][]int{{0, 4}, {5, 1}, {3, 2}}},
		// test_reorder_and_combine input: 0(10) b0, 2(8) b1, 3(5) b2, 1(3) → b2.
		{"skyrl reorder", 12, []int{10, 3, 8, 5}, [][]int{{0}, {2}, {3, 1}}},
		{"skyrl all equal", 10, []int{5, 5, 5, 5}, [][]int{{0, 1}, {2, 3}}},
	})
}

func TestFirstFitDecreasingSkyRLOrder(t *testing.T) {
	runFFD(t, []ffdCase{
		// test_deterministic input: (820,0) b0, (700,5) b1, (520,2) b2,
		// (410,1) → b2 (930), (250,4) → b1 (950), (110,3) → b0 (930),
		// (50,6) → b0 (980).
		{"skyrl deterministic", []int{820, 410, 520, 110, 250, 700, 50}, 1024, 0, 1,
			[][]int{{0, 3, 6}, {5, 4}, {2, 1}}, nil},
		// Ties by descending index: (5,2), (5,1) share b0, (5,0) opens b1.
		{"ties by descending index", []int{5, 5, 5}, 10, 0, 1, [][]int{{2, 1}, {0}}, nil},
		// test_min_bin_count: one bin [2,1,0]; b1 takes 0, b2 takes 1.
		{"skyrl min_bin_count 3", []int{10, 10, 10}, 100, 3, 1, [][]int{{2}, {0}, {1}}, nil},
		// test_bin_count_multiple: [0,1,2,3] and [4] → 4 bins; both new bins
		// pop from the 4-sequence bin.
		{"skyrl bin_count_multiple 4", []int{40, 30, 20, 10, 5}, 100, 0, 4,
			[][]int{{0, 1}, {4}, {3}, {2}}, nil},
		// test_combined_min_and_multiple: one bin [3,2,1,0] → 4 bins.
		{"skyrl min 3 multiple 4", []int{10, 20, 30, 40}, 100, 3, 4, [][]int{{3}, {0}, {1}, {2}}, nil},
		// test_redistribute_preserves_capacity: one bin [0,1,2,3] → the new
		// bin takes 3.
		{"skyrl min 2", []int{40, 30, 20, 10}, 100, 2, 1, [][]int{{0, 1, 2}, {3}}, nil},
		// (30,3), (20,2), (20,1), (10,0) all fit b0 (80); the two new bins
		// pop 0, then 1, from its end.
		{"skyrl pop from the end", []int{10, 20, 20, 30}, 80, 3, 1, [][]int{{3, 2}, {0}, {1}}, nil},
		// b0 [1,3], b1 [0,2]: equal sizes rank by index descending, so the
		// new bin pops from b1.
		{"equal sizes rank by index", []int{6, 6, 4, 4}, 10, 3, 1, [][]int{{1, 3}, {0}, {2}}, nil},
		{"skyrl overflow raises", []int{150}, 100, 0, 1, nil, ErrOversize},
		{"skyrl too few sequences", []int{10, 20}, 100, 5, 1, nil, ErrTooFewSequences},
	})
}
