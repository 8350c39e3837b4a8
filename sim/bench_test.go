package sim

import "testing"

// BenchmarkRun measures one 10-step seed per scenario (events/op is the
// simulated work).
func BenchmarkRun(b *testing.B) {
	for _, sc := range Scenarios {
		b.Run(string(sc), func(b *testing.B) {
			events := 0
			for i := 0; i < b.N; i++ {
				res, err := Run(Config{Seed: int64(i + 1), Scenario: sc})
				if err != nil {
					b.Fatal(err)
				}
				events += res.Events
			}
			b.ReportMetric(float64(events)/float64(b.N), "events/op")
		})
	}
}
