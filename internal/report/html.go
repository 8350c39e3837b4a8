package report

import (
	"bytes"
	"fmt"
	"html/template"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Plot file names inside the report directory.
const (
	RewardPNG     = "reward.png"
	StalenessPNG  = "staleness.png"
	ThroughputPNG = "throughput.png"
)

// Write writes summary.json, the three PNG plots and report.html to dir.
func Write(dir string, s Summary) error {
	if err := WriteJSON(dir, s); err != nil {
		return err
	}
	if err := writePlots(dir, s); err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := page.Execute(&buf, s); err != nil {
		return fmt.Errorf("report: html: %w", err)
	}
	return writeFile(filepath.Join(dir, "report.html"), buf.Bytes())
}

func writePlots(dir string, s Summary) error {
	reward := make(plotter.XYs, len(s.PerStep))
	rollout := make(plotter.XYs, len(s.PerStep))
	train := make(plotter.XYs, len(s.PerStep))
	for i, r := range s.PerStep {
		reward[i] = plotter.XY{X: float64(r.Step), Y: r.RewardMean}
		rollout[i] = plotter.XY{X: float64(r.Step), Y: r.TokensPerSecond}
		train[i] = plotter.XY{X: float64(r.Step), Y: r.TrainTokensPerSecond}
	}
	if err := linePlot(filepath.Join(dir, RewardPNG), "Reward per step", "trainer step", "mean trajectory reward", series{"", reward}); err != nil {
		return err
	}
	if err := linePlot(filepath.Join(dir, ThroughputPNG), "Throughput", "trainer step", "tokens / s",
		series{"rollout (trajectory tokens)", rollout}, series{"trainer (mini-batch tokens)", train}); err != nil {
		return err
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Staleness of trained groups (bound %d)", s.StalenessBound)
	p.X.Label.Text = "staleness (steps)"
	p.Y.Label.Text = "groups"
	vals := make(plotter.Values, len(s.StalenessHistogram))
	labels := make([]string, len(s.StalenessHistogram))
	for i, c := range s.StalenessHistogram {
		vals[i] = float64(c)
		labels[i] = strconv.Itoa(i)
		if i == len(s.StalenessHistogram)-1 && i > 0 {
			labels[i] = ">" + strconv.FormatInt(s.StalenessBound, 10)
		}
	}
	if len(vals) > 0 {
		bars, err := plotter.NewBarChart(vals, vg.Points(20))
		if err != nil {
			return fmt.Errorf("report: staleness plot: %w", err)
		}
		p.Add(bars)
		p.NominalX(labels...)
	}
	if err := p.Save(6*vg.Inch, 3*vg.Inch, filepath.Join(dir, StalenessPNG)); err != nil {
		return fmt.Errorf("report: staleness plot: %w", err)
	}
	return nil
}

// series is one named line of a plot ("" = no legend entry).
type series struct {
	name string
	pts  plotter.XYs
}

func linePlot(path, title, x, y string, ss ...series) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	for i, s := range ss {
		if len(s.pts) == 0 {
			continue
		}
		line, marks, err := plotter.NewLinePoints(s.pts)
		if err != nil {
			return fmt.Errorf("report: %s: %w", title, err)
		}
		line.Color = plotutil.Color(i)
		marks.Color = plotutil.Color(i)
		marks.Shape = plotutil.Shape(i)
		p.Add(line, marks)
		if s.name != "" {
			p.Legend.Add(s.name, line, marks)
		}
	}
	if err := p.Save(6*vg.Inch, 3*vg.Inch, path); err != nil {
		return fmt.Errorf("report: %s: %w", title, err)
	}
	return nil
}

var page = template.Must(template.New("report").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>asyncrl run {{.RunID}}</title>
<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}td,th{padding:2px 8px;text-align:right}</style>
</head><body>
<h1>asyncrl run {{.RunID}}</h1>
<p>task <b>{{.Task}}</b>, seed {{.Seed}}, {{.Steps}}/{{.StepsRequested}} steps, final version {{.FinalVersion}},
{{printf "%.1f" .WallSeconds}} s wall, pause mode {{.PauseMode}}{{if .Interrupted}}, <b>interrupted</b>{{end}}{{if .Error}}, error: {{.Error}}{{end}}.</p>
<p>reward: first 5 steps {{printf "%.3f" .RewardFirst5}}, last 5 steps {{printf "%.3f" .RewardLast5}}{{if .RewardGeneratedVersions}};
of every judged group, kept and dropped: first 5 versions {{printf "%.3f" .RewardGeneratedFirst5}}, last 5 {{printf "%.3f" .RewardGeneratedLast5}}{{end}}.
staleness max {{.StalenessMax}} (bound {{.StalenessBound}}), mean {{printf "%.2f" .StalenessMean}}.
trajectories lost: <b>{{.TrajectoriesLost}}</b>.</p>
<img src="reward.png" alt="reward per step"><br>
<img src="staleness.png" alt="staleness histogram"><br>
<img src="throughput.png" alt="throughput">
<h2>Accounting</h2>
<table>
<tr><th>groups generated</th><td>{{.GroupsGenerated}}</td></tr>
<tr><th>groups trained</th><td>{{.GroupsTrained}}</td></tr>
<tr><th>groups dropped (zero variance)</th><td>{{.GroupsDroppedZeroVariance}}</td></tr>
<tr><th>groups requeued (stale)</th><td>{{.GroupsRequeuedStale}}</td></tr>
<tr><th>groups requeued (aborted)</th><td>{{.GroupsRequeuedAborted}}</td></tr>
<tr><th>groups in flight at stop</th><td>{{.GroupsInFlightAtStop}}</td></tr>
<tr><th>trajectories started / finished / aborted</th><td>{{.TrajectoriesStarted}} / {{.TrajectoriesFinished}} / {{.TrajectoriesAborted}}</td></tr>
<tr><th>trajectories spanning versions</th><td>{{.TrajectoriesMixedVersions}}</td></tr>
<tr><th>tokens / s (all, generated)</th><td>{{printf "%.0f" .TokensPerSecond}} / {{printf "%.0f" .GeneratedTokensPerSec}}</td></tr>
</table>
<h2>Steps</h2>
<table><tr><th>step</th><th>version</th><th>reward</th><th>loss</th><th>entropy</th><th>grad norm</th><th>mismatch</th><th>same-version mismatch (tokens)</th><th>tokens</th><th>staleness max</th><th>t (s)</th></tr>
{{range .PerStep}}<tr><td>{{.Step}}</td><td>{{.Version}}</td><td>{{printf "%.3f" .RewardMean}}</td><td>{{printf "%.4f" .Loss}}</td><td>{{printf "%.3f" .Entropy}}</td><td>{{printf "%.3f" .GradNorm}}</td><td>{{printf "%.2g" .Mismatch}}</td><td>{{if .SameVersionTokens}}{{printf "%.2g" .MismatchSameVersion}} ({{.SameVersionTokens}}){{else}}–{{end}}</td><td>{{.Tokens}}</td><td>{{.StalenessMax}}</td><td>{{printf "%.1f" .ElapsedSeconds}}</td></tr>
{{end}}</table>
</body></html>
`))
