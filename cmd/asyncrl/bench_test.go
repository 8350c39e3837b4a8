package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/transport/dataplane/plan"
)

// seconds reads the modelled time of the line that starts with label.
func seconds(t *testing.T, out, label string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(label) + ` +([0-9.]+) (s|ms|µs)\b`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no %q line in:\n%s", label, out)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v * map[string]float64{"s": 1, "ms": 1e-3, "µs": 1e-6}[m[2]]
}

// The command: both methods printed, broadcast slower by the
// order of magnitude SkyRL published (18×), layouts as given on 2+2 nodes.
func TestBenchWeightSyncPlanQwen3(t *testing.T) {
	if testing.Short() {
		t.Skip("plans ~36k tensors")
	}
	code, out, errOut := cli(t, "bench", "weightsync-plan", "--model", "qwen3-235b-a22b", "--trainer", "tp4,pp2,ep8", "--inference", "dp16,ep16", "--nic-gbps", "400")
	if code != 0 || errOut != "" {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	for _, want := range []string{
		"trainer    tp4/pp2/dp2/ep8, 16 ranks on 2 nodes\n",
		"inference  tp1/pp1/dp16/ep16, 16 ranks on 2 nodes\n",
		"every inference byte covered once",
		"NCCL broadcast 64.72 s vs sharded NIXL pull 3.54 s",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	bc, sh := seconds(t, out, "NCCL broadcast from trainer rank 0"), seconds(t, out, "sharded pull (this plan)")
	if r := bc / sh; r < 64.72/3.54/10 || r > 64.72/3.54*10 {
		t.Errorf("broadcast %.3g s / sharded %.3g s = %.3g×, not within 10× of the published 18×", bc, sh, r)
	}
	// Halving the NIC rate doubles both bandwidth-bound times.
	_, slow, _ := cli(t, "bench", "weightsync-plan", "--model", "qwen3-235b-a22b", "--trainer", "tp4,pp2,ep8", "--inference", "dp16,ep16", "--nic-gbps", "200")
	if s2 := seconds(t, slow, "sharded pull (this plan)"); s2 < 1.9*sh || s2 > 2.1*sh {
		t.Errorf("--nic-gbps 200: sharded %.3g s, want about 2 × %.3g s", s2, sh)
	}
}

// The built-in preset needs no flags and plans in an instant; its tensor
// list must stay the built-in policy's.
func TestBenchWeightSyncPlanBuiltin(t *testing.T) {
	c := model.DefaultConfig()
	m := plan.BuiltinPolicy(c.VocabSize, c.Window, c.EmbedDim, c.Hidden, c.Layers)
	ps, err := plan.PresetByName("builtin")
	if err != nil {
		t.Fatal(err)
	}
	if ps.Model.Bytes() != m.Bytes() || len(ps.Model.Tensors) != len(m.Tensors) {
		t.Fatalf("builtin preset %d B in %d tensors; policy.DefaultConfig gives %d B in %d", ps.Model.Bytes(), len(ps.Model.Tensors), m.Bytes(), len(m.Tensors))
	}
	code, out, errOut := cli(t, "bench", "weightsync-plan", "--model", "builtin", "--inference-nodes", "1")
	if code != 0 || errOut != "" {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	if !strings.Contains(out, "model      builtin: 188.4 KB, 5 tensors\n") || !strings.Contains(out, "inference  tp1/pp1/dp8/ep1, 8 ranks on 1 nodes\n") {
		t.Errorf("unexpected output:\n%s", out)
	}
}

func TestBenchWeightSyncPlanBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--model", "llama"}, `--model: plan: bad layout: unknown model "llama"`},
		{[]string{"--model", "builtin", "--trainer", "tp3"}, `--trainer: plan: bad layout: "tp3"`},
		{[]string{"--model", "builtin", "--inference", "dp2,cp2"}, `unknown parallelism "cp"`},
		{[]string{"--model", "builtin", "--nic-gbps", "0"}, "Cluster.NICGbps must be > 0"},
		{[]string{"--model", "builtin", "--trainer-nodes", "-1"}, "--trainer-nodes and --inference-nodes must be >= 0"},
		{[]string{"--model", "builtin", "--split-mib", "-1"}, "--split-mib must be >= 0"},
		{[]string{"--model", "builtin", "--trainer", "tp2"}, "1 ranks are not a multiple of TP·PP = 2"},
		{[]string{"--model", "builtin", "--trainer", "tp256", "--trainer-nodes", "32"}, "not divisible by TP 256"},
		{[]string{"extra"}, "unknown command"},
	} {
		code, out, errOut := cli(t, append([]string{"bench", "weightsync-plan"}, tc.args...)...)
		if code != 1 || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: code %d, stdout %q, stderr %q; want 1 and %q", tc.args, code, out, errOut, tc.want)
		}
	}
}

func TestBenchParent(t *testing.T) {
	code, out, _ := cli(t, "bench")
	if code != 0 || !strings.Contains(out, "weightsync-plan") {
		t.Errorf("bench: code %d, stdout %q; want 0 and the subcommand listed", code, out)
	}
	code, out, errOut := cli(t, "bench", "weightsync")
	if want := "asyncrl bench: unknown subcommand \"weightsync\" (available: weightsync-plan)\n"; code != 1 || out != "" || errOut != want {
		t.Errorf("bench weightsync: code %d, stdout %q, stderr %q; want 1, %q", code, out, errOut, want)
	}
}
