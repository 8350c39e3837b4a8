package data

import (
	"encoding/json"
	"fmt"
	"io"
)

// Block-shuffle defaults: 8192-row blocks, 8 blocks in a window (65,536
// rows, ~14 MB of uint16 tokens at the benchmark's mean length). Fewer,
// larger blocks keep RSS flatter (each touched block maps up to a large
// folio more than it reads) but draw a window from fewer places; see
// docs/sft.md "Samplers" and BENCHMARKS.md "SFT data path".
const (
	DefaultBlockRows    = 8192
	DefaultWindowBlocks = 8
)

// BlockShuffle yields every row once per epoch, like Shuffle, but
// block-locally: the rows (all datasets concatenated, in shard order) are
// cut into blocks of BlockRows consecutive rows; each epoch permutes the
// blocks (a Feistel permutation keyed by seed and epoch), takes them
// Window at a time in that order, and yields the rows of one window in a
// permutation of their own (keyed by seed, epoch and window) before the
// next window starts. So reads stay within Window contiguous byte ranges
// at a time, which the stream reads through the file mapping and drops
// once per window (see DataStream), instead of one pread per row.
//
// What it gives up against Shuffle: rows that lie within the same block
// are always drawn within the same window of Window·BlockRows draws, and
// a window's rows come from at most Window places in the file; the order
// of blocks and of rows inside a window is uniform. State is the same
// {epoch, position} as Shuffle's, so it resumes exactly.
type BlockShuffle struct {
	sizes            []int64
	total            int64
	seed             uint64
	epochs           int
	blockRows        int64
	window           int64
	nblocks, ngroups int64
	at               position

	epochKey uint64
	blocks   Perm
	// the current window: its number, first position, and its blocks
	g        int64
	gStart   int64
	gRows    int64
	gBlocks  []int64 // block numbers
	gCum     []int64 // row starts of the blocks inside the window, len+1
	rows     Perm
	gEpoch   int
	gCurrent bool
}

// NewBlockShuffle returns a block-local shuffled sampler (epochs 0 =
// endless); blockRows and window below 1 take the defaults.
func NewBlockShuffle(sizes []int64, seed uint64, epochs, blockRows, window int) *BlockShuffle {
	if blockRows < 1 {
		blockRows = DefaultBlockRows
	}
	if window < 1 {
		window = DefaultWindowBlocks
	}
	s := &BlockShuffle{sizes: sizes, total: sum(sizes), seed: seed, epochs: epochs, blockRows: int64(blockRows), window: int64(window)}
	s.nblocks = (s.total + s.blockRows - 1) / s.blockRows
	s.ngroups = (s.nblocks + s.window - 1) / s.window
	return s
}

func (s *BlockShuffle) blockLen(b int64) int64 {
	return min(s.blockRows, s.total-b*s.blockRows)
}

// setGroup makes window g of the current epoch current, starting at
// position start.
func (s *BlockShuffle) setGroup(g, start int64) {
	s.g, s.gStart = g, start
	s.gBlocks, s.gCum = s.gBlocks[:0], append(s.gCum[:0], 0)
	for j := g * s.window; j < min((g+1)*s.window, s.nblocks); j++ {
		b := int64(s.blocks.At(uint64(j)))
		s.gBlocks = append(s.gBlocks, b)
		s.gCum = append(s.gCum, s.gCum[len(s.gCum)-1]+s.blockLen(b))
	}
	s.gRows = s.gCum[len(s.gCum)-1]
	s.rows = NewPerm(uint64(s.gRows), hash3(s.epochKey, 0x57494e44, uint64(g)))
	s.gEpoch, s.gCurrent = s.at.Epoch, true
}

// seek makes the window holding position at.Pos of epoch at.Epoch current.
func (s *BlockShuffle) seek() {
	s.epochKey = hash3(s.seed, 0x424c4b53, uint64(s.at.Epoch))
	s.blocks = NewPerm(uint64(s.nblocks), s.epochKey)
	var start int64
	for g := int64(0); ; g++ {
		s.setGroup(g, start)
		if s.at.Pos < start+s.gRows || g == s.ngroups-1 {
			return
		}
		start += s.gRows
	}
}

// Next implements Sampler.
func (s *BlockShuffle) Next() (Pick, error) {
	if s.at.Pos == s.total {
		s.at = position{Epoch: s.at.Epoch + 1}
		s.gCurrent = false
	}
	if s.epochs > 0 && s.at.Epoch >= s.epochs {
		return Pick{}, io.EOF
	}
	if !s.gCurrent || s.gEpoch != s.at.Epoch {
		s.seek()
	} else if s.at.Pos == s.gStart+s.gRows {
		s.setGroup(s.g+1, s.at.Pos)
	}
	j := int64(s.rows.At(uint64(s.at.Pos - s.gStart)))
	k := 0
	for s.gCum[k+1] <= j {
		k++
	}
	s.at.Pos++
	return locate(s.sizes, s.gBlocks[k]*s.blockRows+j-s.gCum[k]), nil
}

// Window is a number that changes exactly when the sampler moves to
// another window (the stream drops the pages it read then).
func (s *BlockShuffle) Window() int64 {
	return int64(s.gEpoch)*s.ngroups + s.g
}

// State implements Sampler.
func (s *BlockShuffle) State() ([]byte, error) { return json.Marshal(s.at) }

// Restore implements Sampler.
func (s *BlockShuffle) Restore(b []byte) error {
	if err := restorePos(b, s.total, &s.at); err != nil {
		return err
	}
	s.gCurrent = false
	return nil
}

// String describes the sampler's shape.
func (s *BlockShuffle) String() string {
	return fmt.Sprintf("block_shuffle(%d rows, %d-row blocks, %d per window)", s.total, s.blockRows, s.window)
}

var _ Sampler = (*BlockShuffle)(nil)

// windowed is a sampler that draws from one window of file ranges at a
// time: the stream reads its rows through the mapping and drops the
// pages read whenever Window changes.
type windowed interface{ Window() int64 }

var _ windowed = (*BlockShuffle)(nil)
