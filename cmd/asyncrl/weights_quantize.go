package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/asyncrl/asyncrl/weights/quant"
	"github.com/asyncrl/asyncrl/weights/quantdir"
)

// newWeightsQuantizeCmd: asyncrl weights quantize — a Hugging Face serving
// checkpoint quantised into FP8/MXFP8 the way publisher.quantize publishes
// it (weights/quantdir; docs/models.md).
func newWeightsQuantizeCmd(g *globals) *cobra.Command {
	var scheme string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "quantize --scheme fp8|mxfp8 SRC DST",
		Short: "Quantise a Hugging Face checkpoint's linear weights (FP8 block-wise or MXFP8) into a new directory, as publisher.quantize does",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := quant.Lookup(scheme)
			if err != nil {
				return fail("asyncrl weights quantize: --scheme: %v", err)
			}
			src, dst := args[0], args[1]
			if ents, err := os.ReadDir(dst); err == nil && len(ents) > 0 {
				return fail("asyncrl weights quantize: %s is not empty (give a new directory)", dst)
			}
			st, err := quantdir.Quantize(src, dst, s)
			if err != nil {
				return fmt.Errorf("asyncrl weights quantize: %w", err)
			}
			if asJSON {
				return writeJSON(g.stdout, map[string]any{"dir": dst, "scheme": s.Name(), "elements": st.N,
					"max_abs_error": st.MaxAbs, "max_rel_error": st.MaxRel, "rms_error": st.RMS()})
			}
			fmt.Fprintf(g.stdout, "%s: %s, %d quantised values, error max |d| %.3g, max rel %.3g, rms %.3g\n",
				dst, s.Name(), st.N, st.MaxAbs, st.MaxRel, st.RMS())
			return nil
		},
	}
	cmd.Flags().StringVar(&scheme, "scheme", "fp8", "fp8 (E4M3, 128×128 blocks, DeepSeek-V3's layout) or mxfp8 (E4M3 with E8M0 scales per 32)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}
