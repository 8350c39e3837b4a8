package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/asyncrl/asyncrl/transport/dataplane/plan"
)

// newBenchCmd: asyncrl bench — models and benchmarks that answer "how fast
// could this be" without starting a run.
func newBenchCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Run workloads and benchmarks",
		Long: "Benchmarks and models. The measured suites run with `make bench`\n" +
			"(results in BENCHMARKS.md); the subcommands here need no cluster.",
		Args: cobra.ArbitraryArgs,
		// A mistyped subcommand is an error, not the help page and exit 0.
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fail("asyncrl bench: unknown subcommand %q (available: weightsync-plan)", args[0])
			}
			return cmd.Help()
		},
	}
	cmd.AddCommand(newBenchWeightSyncPlanCmd(g))
	return cmd
}

// newBenchWeightSyncPlanCmd: asyncrl bench weightsync-plan — plans one
// weight sync with the sharded planner and compares the modelled time of a
// broadcast from trainer rank 0 with the plan's pull.
func newBenchWeightSyncPlanCmd(g *globals) *cobra.Command {
	var (
		model, trainer, inference   string
		trainNodes, inferNodes      int
		gpusPerNode, nicsPerNode    int
		nicGbps, intraGBps          float64
		splitMiB                    int64
		defaultCluster, defaultPlan = plan.DefaultCluster(), plan.DefaultConfig()
	)
	cmd := &cobra.Command{
		Use:   "weightsync-plan",
		Short: "Model a weight sync: NCCL broadcast from trainer rank 0 vs the sharded pull",
		Long: "Plan which trainer rank sends which bytes to which inference rank (TP/PP/DP/EP),\n" +
			"check that every inference byte is covered exactly once, and estimate the sync\n" +
			"time of a broadcast from trainer rank 0 against the planned pull. The estimate\n" +
			"counts bandwidth only (links at line rate, no per-call latency): a floor to read\n" +
			"the two methods' ratio from, not a prediction of a measured run.\n\n" +
			"A layout is comma-separated sizes (tp4,pp2,ep8); an unwritten size is 1, except\n" +
			"DP, which fills the side's GPUs (--trainer-nodes × --gpus-per-node, or the\n" +
			"preset's GPU count when no node count is given).",
		Example: "  asyncrl bench weightsync-plan --model qwen3-235b-a22b --trainer tp4,pp2,ep8 --inference dp16,ep16 --nic-gbps 400\n" +
			"  asyncrl bench weightsync-plan --model kimi-k2\n" +
			"  asyncrl bench weightsync-plan --model builtin",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			const name = "asyncrl bench weightsync-plan"
			ps, err := plan.PresetByName(model)
			if err != nil {
				return fail("%s: --model: %v", name, err)
			}
			c := plan.Cluster{GPUsPerNode: gpusPerNode, NICsPerNode: nicsPerNode, NICGbps: nicGbps, IntraGBps: intraGBps}
			if err := c.Validate(); err != nil {
				return fail("%s: %v", name, err)
			}
			side := func(flag, spec string, nodes int, preset plan.Layout) (plan.Layout, error) {
				if spec == "" && nodes == 0 {
					return preset, nil
				}
				if spec == "" {
					spec = fmt.Sprintf("tp%d,pp%d,ep%d", preset.TP, preset.PP, preset.EP)
				}
				// DP as written, else it fills the nodes given, else the
				// preset's GPU count.
				world := preset.World()
				switch {
				case nodes > 0:
					world = nodes * c.GPUsPerNode
				case strings.Contains(strings.ToLower(spec), "dp"):
					world = 0
				}
				l, err := plan.ParseLayout(spec, world)
				if err != nil {
					return l, fmt.Errorf("--%s: %w", flag, err)
				}
				return l, nil
			}
			if trainNodes < 0 || inferNodes < 0 {
				return fail("%s: --trainer-nodes and --inference-nodes must be >= 0 (0: the preset's)", name)
			}
			train, err := side("trainer", trainer, trainNodes, ps.Train)
			if err != nil {
				return fail("%s: %v", name, err)
			}
			infer, err := side("inference", inference, inferNodes, ps.Infer)
			if err != nil {
				return fail("%s: %v", name, err)
			}
			if splitMiB < 0 {
				return fail("%s: --split-mib must be >= 0 (0: never split), got %d", name, splitMiB)
			}
			p, err := plan.Build(plan.Config{SplitBytes: splitMiB << 20}, ps.Model, train, infer)
			if err != nil {
				return fail("%s: %v", name, err)
			}
			if err := plan.Validate(p); err != nil {
				return fail("%s: the plan does not cover the inference ranks: %v", name, err)
			}
			e, err := plan.EstimateSync(c, p)
			if err != nil {
				return fail("%s: %v", name, err)
			}
			printWeightSyncPlan(g.stdout, ps, p, c, e)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&model, "model", "qwen3-235b-a22b", "model preset: qwen3-235b-a22b, kimi-k2, glm-4.5, builtin")
	f.StringVar(&trainer, "trainer", "", "trainer layout, e.g. tp4,pp2,ep8 (default: the preset's)")
	f.StringVar(&inference, "inference", "", "inference layout, e.g. dp16,ep16 (default: the preset's)")
	f.IntVar(&trainNodes, "trainer-nodes", 0, "trainer nodes; DP fills them when the layout omits it (0: the preset's GPU count)")
	f.IntVar(&inferNodes, "inference-nodes", 0, "inference nodes; DP fills them when the layout omits it (0: the preset's GPU count)")
	f.IntVar(&gpusPerNode, "gpus-per-node", defaultCluster.GPUsPerNode, "GPUs (ranks) per node")
	f.IntVar(&nicsPerNode, "nics-per-node", defaultCluster.NICsPerNode, "network adapters per node")
	f.Float64Var(&nicGbps, "nic-gbps", defaultCluster.NICGbps, "line rate of each adapter, Gb/s")
	f.Float64Var(&intraGBps, "intra-gbps", defaultCluster.IntraGBps, "GPU-to-GPU bandwidth inside a node (NVLink), GB/s")
	f.Int64Var(&splitMiB, "split-mib", defaultPlan.SplitBytes>>20, "cut a piece this large among its trainer replicas (0: never)")
	return cmd
}

func printWeightSyncPlan(w io.Writer, ps plan.Preset, p *plan.Plan, c plan.Cluster, e plan.Estimate) {
	rankGBs := c.RankNICBytesPerSecond() / 1e9
	b, s := e.Broadcast, e.Sharded
	var sb strings.Builder
	fmt.Fprintf(&sb, "model      %s: %s, %d tensors\n", ps.Name, fmtBytes(e.ModelBytes), len(p.Model.Tensors))
	fmt.Fprintf(&sb, "trainer    %s, %d ranks on %d nodes\n", p.Train, p.Train.World(), e.TrainNodes)
	fmt.Fprintf(&sb, "inference  %s, %d ranks on %d nodes\n", p.Infer, p.Infer.World(), e.InferNodes)
	fmt.Fprintf(&sb, "cluster    %d GPUs/node, %d×%g Gb/s NICs/node (%.1f GB/s per GPU), intra-node %g GB/s\n",
		c.GPUsPerNode, c.NICsPerNode, c.NICGbps, rankGBs, c.IntraGBps)
	fmt.Fprintf(&sb, "plan       %d transfers, %s moved, every inference byte covered once\n\n", len(p.Transfers), fmtBytes(p.TotalBytes()))
	row := func(label, value, detail string) {
		sb.WriteString(strings.TrimRight(fmt.Sprintf("%-36s %9s  %s", label, value, detail), " ") + "\n")
	}
	row("NCCL broadcast from trainer rank 0", fmtSeconds(b.Seconds), fmt.Sprintf("gather %s (%s over its NIC, %s over NVLink) + broadcast %s (%s at %.1f GB/s)",
		fmtSeconds(b.GatherSeconds), fmtBytes(b.GatherNICBytes), fmtBytes(b.GatherIntraBytes), fmtSeconds(b.BroadcastSeconds), fmtBytes(b.BroadcastBytes), rankGBs))
	row("sharded pull (this plan)", fmtSeconds(s.Seconds), fmt.Sprintf("busiest rank %s (%s), busiest node %s (%s)",
		fmtBytes(s.BusiestRankBytes), fmtSeconds(s.RankSeconds), fmtBytes(s.BusiestNodeBytes), fmtSeconds(s.NodeSeconds)))
	row("speedup", fmt.Sprintf("%.1f×", e.Speedup), "")
	row("published (the preset's layouts)", "", ps.Published)
	sb.WriteString("(bandwidth only: links at line rate, no per-call latency or weight conversion)\n")
	io.WriteString(w, sb.String())
}

// fmtBytes prints n in decimal units (GB as NIC rates are quoted).
func fmtBytes(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.1f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1f KB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d B", n)
}

// fmtSeconds keeps three significant-ish digits from µs to minutes.
func fmtSeconds(s float64) string {
	switch {
	case s >= 0.1:
		return fmt.Sprintf("%.2f s", s)
	case s >= 1e-4:
		return fmt.Sprintf("%.2f ms", s*1e3)
	}
	return fmt.Sprintf("%.2f µs", s*1e6)
}
